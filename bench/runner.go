package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Payload layout: every message starts with payloadMagic and the sender's wall-clock time in
// Unix nanoseconds; the rest is random bytes (incompressible unless the workload says so).
//
//	0      4                 12                messageSize
//	| RLB1 | sent unix ns u64 | random ...      |
const (
	payloadMagic       = 0x31424c52 // "RLB1" little-endian
	payloadStampOffset = 4
)

// Run timing knobs.
const (
	sampleIntervalDefault = time.Second
	flushTimeout          = 30 * time.Second
	drainTimeout          = 10 * time.Second
	caughtUpWindow        = 100 * time.Millisecond // lag under this much production = caught up
	// measureStretchMax bounds how long RunOptions.MeasuredMessagesMin keeps a window open
	// past the workload's duration.
	measureStretchMax = time.Minute
	// measuredMessagesMinDefault is DefaultMeasuredMessagesMin at max rate: 100
	// acknowledgements give a p99 of publish latency one sample to stand on, and any run that
	// is not starved passes it in the first milliseconds of its window (a 1 KiB max-rate run
	// acknowledges ~10^5 a second here, a one-record-at-a-time fsync run ~10^3).
	measuredMessagesMinDefault = 100
)

// DefaultMeasuredMessagesMin is the RunOptions.MeasuredMessagesMin `ringlog bench run` uses
// unless told otherwise: measuredMessagesMinDefault, and for a paced workload never more
// than half of what its schedule sends in the window (at least 1), so that a healthy run
// of a low rate ends on time (50 msg/s for 1 s asks for 25). Only a window that saw fewer
// runs on, for at most measureStretchMax.
func DefaultMeasuredMessagesMin(w Workload) int64 {
	n := int64(measuredMessagesMinDefault)
	if w.ProducerRate > 0 {
		scheduled := int64(float64(w.ProducerRate) * w.Duration.D().Seconds())
		n = min(n, max(scheduled/2, 1))
	}
	return n
}

// RunOptions configure one run of a workload against one driver.
type RunOptions struct {
	Workload       Workload
	Driver         Driver
	Clock          Clock         // nil = RealClock
	SampleInterval time.Duration // 0 = 1s
	Progress       *ProgressLine // nil = none
	BrokerPID      int           // overrides the driver's PID for RSS sampling
	TopicPrefix    string        // default "bench"
	// TopicSuffix, when set, names the topics PREFIX-WORKLOAD-SUFFIX-N instead of with a
	// suffix unique to the run, and a run reuses them when they exist (the driver's
	// CreateTopic answers ErrTopicExists): runs on one cluster can then share warm topics.
	TopicSuffix string
	DataDir     string // for the hardware line's disk; "" = current directory
	// MeasuredMessagesMin, when positive, keeps the measured window open past the workload's
	// duration until this many messages were acknowledged in it and (with consumers) one
	// came back in it, checked every SampleInterval, for at most measureStretchMax more: a
	// window of a fixed time on a starved machine can see nothing. The result's
	// TestSeconds is the window's real length. 0 keeps the window to its duration;
	// `ringlog bench run` passes DefaultMeasuredMessagesMin unless told otherwise.
	MeasuredMessagesMin int64
}

type run struct {
	opts       RunOptions
	w          Workload
	clock      Clock
	totals     counters
	gate       measureGate
	producers  []*producerStats
	consumers  []*consumerStats
	topics     []string
	backlog    *Backlog
	backlogMsg int64        // messages in the backlog when consumers started
	consumeAt  time.Time    // when consumers started
	caughtUp   atomic.Int64 // ns after consumeAt; 0 = not yet
	// partitionSent counts sends per partition index (summed over topics): the skew a key
	// distribution produced.
	partitionSent []atomic.Int64
	// clientPlaces: keyDistribution none on a NullKeyPlacer driver; sends carry partition -1.
	clientPlaces bool
	backlogAt    atomic.Int64 // ns after consumeAt; 0 = not yet
	// backlogCPU is the broker's (and this process's) CPU when consumers started and (in
	// backlogCPUEnd and backlogBenchCPUEnd, as float64 bits) when they finished the backlog.
	backlogCPU         cpuWindow
	backlogCPUPID      int
	backlogCPUEnd      atomic.Uint64
	backlogBenchCPUEnd atomic.Uint64
}

type consumerStats struct {
	mu       sync.Mutex // guards endToEnd
	endToEnd *Latency
}

// Run executes a workload: create topics, fill the backlog if any, start consumers and
// producers, warm up, measure, stop, drain, and return the result.
func Run(ctx context.Context, opts RunOptions) (*Result, error) {
	r, err := newRun(opts)
	if err != nil {
		return nil, err
	}
	return r.execute(ctx)
}

// newRun checks the options and fills their defaults.
func newRun(opts RunOptions) (*run, error) {
	if err := opts.Workload.Validate(); err != nil {
		return nil, err
	}
	if opts.Driver == nil {
		return nil, errors.New("run: no driver")
	}
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.SampleInterval <= 0 {
		opts.SampleInterval = sampleIntervalDefault
	}
	if opts.TopicPrefix == "" {
		opts.TopicPrefix = "bench"
	}
	if opts.DataDir == "" {
		opts.DataDir = "."
	}
	r := &run{opts: opts, w: opts.Workload, clock: opts.Clock}
	r.partitionSent = make([]atomic.Int64, opts.Workload.PartitionsPerTopic)
	if placer, ok := opts.Driver.(NullKeyPlacer); ok && placer.PlacesNullKeys() && r.w.KeyDistribution == KeysNone {
		r.clientPlaces = true
	}
	return r, nil
}

func (r *run) execute(ctx context.Context) (*Result, error) {
	result := &Result{
		Workload: r.w, Hardware: DetectHardware(r.opts.DataDir),
		Started: time.Now().UTC(), Version: resultFormat,
	}
	if err := r.createTopics(ctx); err != nil {
		return nil, err
	}
	// Drivers learn storage settings from the topics they create: describe again.
	result.Driver = r.opts.Driver.Info()
	if r.opts.BrokerPID != 0 {
		result.Driver.BrokerPID = r.opts.BrokerPID
	}
	producers, err := r.openProducers(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range producers {
			_ = p.Close()
		}
	}()
	if r.w.BacklogSize > 0 {
		if err := r.fillBacklog(ctx, producers); err != nil {
			return nil, err
		}
		result.Backlog = r.backlog
	}
	consumers, err := r.openConsumers(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range consumers {
			_ = c.Close()
		}
	}()

	consumeCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var consumerWG sync.WaitGroup
	consumeErrs := make(chan error, len(consumers))
	r.consumeAt = time.Now()
	r.backlogMsg = r.totals.published.Load()
	if r.backlog != nil {
		r.backlogCPUPID, _ = r.brokerPID()
		r.backlogCPU = startCPU(r.backlogCPUPID)
	}
	for i, c := range consumers {
		consumerWG.Add(1)
		go func() {
			defer consumerWG.Done()
			if err := r.consume(consumeCtx, c, r.consumers[i]); err != nil {
				consumeErrs <- err
			}
		}()
	}

	produceCtx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var producerWG sync.WaitGroup
	produceErrs := make(chan error, len(producers))
	start := r.clock.Now()
	for i, p := range producers {
		loop := r.newLoop(p, i, start, 0)
		producerWG.Add(1)
		go func() {
			defer producerWG.Done()
			if err := loop.run(produceCtx); err != nil {
				produceErrs <- err
			}
		}()
	}

	samples, window, rss, err := r.sample(ctx, start, consumeErrs, produceErrs)
	stopProducers()
	producerWG.Wait()
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), flushTimeout)
	for _, p := range producers {
		if ferr := p.Flush(flushCtx); ferr != nil && err == nil {
			err = fmt.Errorf("flush producer: %w", ferr)
		}
	}
	cancelFlush()
	r.waitDrained(ctx, consumeErrs)
	stopConsumers()
	consumerWG.Wait()
	if r.opts.Progress != nil {
		r.opts.Progress.Done()
	}
	if err != nil {
		return nil, err
	}
	r.summarize(result, samples, window, rss)
	return result, nil
}

// ErrTopicExists is what a Driver's CreateTopic wraps when the topic exists already.
var ErrTopicExists = errors.New("topic exists")

// createTopics creates the workload's topics under a name unique to this run, or under
// RunOptions.TopicSuffix, reusing topics that exist.
func (r *run) createTopics(ctx context.Context) error {
	suffix := r.opts.TopicSuffix
	if suffix == "" {
		suffix = fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	}
	for t := range r.w.Topics {
		name := fmt.Sprintf("%s-%s-%s-%d", r.opts.TopicPrefix, r.w.Name, suffix, t)
		err := r.opts.Driver.CreateTopic(ctx, name, r.w.PartitionsPerTopic)
		if err != nil && !(r.opts.TopicSuffix != "" && errors.Is(err, ErrTopicExists)) {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		r.topics = append(r.topics, name)
	}
	return nil
}

func (r *run) openProducers(ctx context.Context) ([]Producer, error) {
	var producers []Producer
	opts := ProducerOptions{Acks: r.w.Acks, Compression: r.w.Compression, Durability: r.w.Durability, MaxInFlight: r.w.MaxInFlight,
		BatchBytes: int(r.w.BatchBytes), ClientPlacesNullKeys: r.clientPlaces}
	for _, topic := range r.topics {
		for range r.w.Producers {
			p, err := r.opts.Driver.NewProducer(ctx, topic, opts)
			if err != nil {
				for _, opened := range producers {
					_ = opened.Close()
				}
				return nil, fmt.Errorf("new producer on %s: %w", topic, err)
			}
			producers = append(producers, p)
			r.producers = append(r.producers, newProducerStats())
		}
	}
	return producers, nil
}

func (r *run) openConsumers(ctx context.Context) ([]Consumer, error) {
	var consumers []Consumer
	for _, topic := range r.topics {
		for c := range r.w.Consumers {
			var partitions []int
			for p := c; p < r.w.PartitionsPerTopic; p += r.w.Consumers {
				partitions = append(partitions, p)
			}
			consumer, err := r.opts.Driver.NewConsumer(ctx, topic, partitions)
			if err != nil {
				for _, opened := range consumers {
					_ = opened.Close()
				}
				return nil, fmt.Errorf("new consumer on %s: %w", topic, err)
			}
			consumers = append(consumers, consumer)
			r.consumers = append(r.consumers, &consumerStats{endToEnd: NewLatency()})
		}
	}
	return consumers, nil
}

// newLoop builds producer index's send loop. rate 0 uses the workload's rate.
func (r *run) newLoop(p Producer, index int, start time.Time, bytesMax int64) *producerLoop {
	payload := make([]byte, r.w.MessageSize)
	rng := rand.New(rand.NewPCG(uint64(index)+1, 0x7061796c))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	binary.LittleEndian.PutUint32(payload, payloadMagic)
	keys := newKeyChooser(r.w, uint64(index)+1, r.clientPlaces)
	loop := &producerLoop{
		clock: r.clock, inFlight: make(chan struct{}, r.w.MaxInFlight), stats: r.producers[index],
		totals: &r.totals, gate: &r.gate, messageSize: int64(r.w.MessageSize), bytesMax: bytesMax,
	}
	if r.w.ProducerRate > 0 && bytesMax == 0 {
		perProducer := float64(r.w.ProducerRate) / float64(len(r.producers))
		loop.pacer = newPacer(start, perProducer)
	}
	loop.send = func(sentAt time.Time, done func(error)) error {
		binary.LittleEndian.PutUint64(payload[payloadStampOffset:], uint64(sentAt.UnixNano()))
		partition, key := keys.choose()
		if partition >= 0 { // -1: the client places it, unseen here
			r.partitionSent[partition].Add(1)
		}
		return p.Send(partition, key, payload, done)
	}
	return loop
}

// fillBacklog writes BacklogSize bytes at full speed before any consumer exists.
func (r *run) fillBacklog(ctx context.Context, producers []Producer) error {
	target := int64(r.w.BacklogSize)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(producers))
	for i, p := range producers {
		loop := r.newLoop(p, i, start, target)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop.run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	ticker := time.NewTicker(r.opts.SampleInterval)
	defer ticker.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-ticker.C:
			if r.opts.Progress != nil {
				written := r.totals.publishedBytes.Load()
				elapsed := time.Since(start)
				rate := float64(written) / elapsed.Seconds()
				eta := time.Duration(float64(target-written) / max(rate, 1) * float64(time.Second))
				r.opts.Progress.Printf("backlog fill: %s of %s  %.0f MB/s  elapsed %v  ETA %v",
					FormatBytes(written), FormatBytes(target), rate/1e6, elapsed.Round(time.Second), eta.Round(time.Second))
			}
		}
	}
	close(errs)
	for err := range errs {
		return fmt.Errorf("backlog fill: %w", err)
	}
	for _, p := range producers {
		if err := p.Flush(ctx); err != nil {
			return fmt.Errorf("backlog fill: flush: %w", err)
		}
	}
	r.backlog = &Backlog{
		TargetBytes: target, WrittenBytes: r.totals.publishedBytes.Load(),
		WrittenMessages: r.totals.published.Load(), FillSeconds: time.Since(start).Seconds(),
	}
	return nil
}

func (r *run) consume(ctx context.Context, c Consumer, stats *consumerStats) error {
	rateWindow := int64(float64(r.w.ProducerRate) * caughtUpWindow.Seconds())
	handle := func(_ int, value []byte) {
		now := r.clock.Now()
		if len(value) < payloadStampOffset+8 || binary.LittleEndian.Uint32(value) != payloadMagic {
			r.totals.badPayloads.Add(1)
			return
		}
		sent := time.Unix(0, int64(binary.LittleEndian.Uint64(value[payloadStampOffset:])))
		consumed := r.totals.consumed.Add(1)
		r.totals.consumedBytes.Add(int64(len(value)))
		if r.gate.on.Load() {
			stats.mu.Lock()
			stats.endToEnd.Record(now.Sub(sent))
			stats.mu.Unlock()
		}
		if r.backlog != nil {
			r.noteCatchUp(consumed, rateWindow)
		}
	}
	if bc, ok := c.(BatchConsumer); ok {
		return r.consumeBatches(ctx, bc, stats, rateWindow)
	}
	for {
		if err := c.Poll(ctx, handle); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll: %w", err)
		}
	}
}

// consumeBatches is consume for a BatchConsumer: per batch, one clock read, one add to each
// counter, one end-to-end latency sample (the batch's first good record: the oldest in it,
// so the sample leans towards the batch's worst) and one catch-up check; per message only
// the payload check and the sums.
func (r *run) consumeBatches(ctx context.Context, c BatchConsumer, stats *consumerStats, rateWindow int64) error {
	handle := func(_ int, values iter.Seq[[]byte]) {
		now := r.clock.Now()
		var messages, bytes, bad, sentNs int64
		for value := range values {
			if len(value) < payloadStampOffset+8 || binary.LittleEndian.Uint32(value) != payloadMagic {
				bad++
				continue
			}
			if messages == 0 {
				sentNs = int64(binary.LittleEndian.Uint64(value[payloadStampOffset:]))
			}
			messages++
			bytes += int64(len(value))
		}
		if bad > 0 {
			r.totals.badPayloads.Add(bad)
		}
		if messages == 0 {
			return
		}
		consumed := r.totals.consumed.Add(messages)
		r.totals.consumedBytes.Add(bytes)
		if r.gate.on.Load() {
			stats.mu.Lock()
			stats.endToEnd.Record(now.Sub(time.Unix(0, sentNs)))
			stats.mu.Unlock()
		}
		if r.backlog != nil {
			r.noteCatchUp(consumed, rateWindow)
		}
	}
	for {
		if err := c.PollBatches(ctx, handle); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll: %w", err)
		}
	}
}

// noteCatchUp records when the consumers finished the backlog and when they first came
// within caughtUpWindow of the live head.
func (r *run) noteCatchUp(consumed, rateWindow int64) {
	if r.caughtUp.Load() != 0 {
		return
	}
	elapsed := int64(max(time.Since(r.consumeAt), 1))
	if r.backlogAt.Load() == 0 && consumed >= r.backlogMsg {
		if r.backlogAt.CompareAndSwap(0, elapsed) && r.backlogCPU.ok {
			if now, err := ReadCPUSeconds(r.backlogCPUPID); err == nil {
				r.backlogCPUEnd.Store(math.Float64bits(now))
				if bench, err := benchCPUSeconds(r.backlogCPUPID, now); err == nil {
					r.backlogBenchCPUEnd.Store(math.Float64bits(bench))
				}
			}
		}
	}
	if r.backlogAt.Load() != 0 && r.totals.published.Load()-consumed <= max(rateWindow, 1) {
		r.caughtUp.CompareAndSwap(0, elapsed)
	}
}

// window is the measured interval's counter snapshots.
type window struct {
	start, end             time.Time
	pub0, pubBytes0        int64
	pub1, pubBytes1        int64
	con0, conBytes0        int64
	con1, conBytes1        int64
	warmupSeconds, seconds float64
	cpu                    cpuWindow
}

func (r *run) sample(ctx context.Context, start time.Time, consumeErrs, produceErrs chan error) ([]Sample, window, RSSStats, error) {
	warmup, test := r.w.Warmup.D(), r.w.Duration.D()
	ticker := time.NewTicker(r.opts.SampleInterval)
	defer ticker.Stop()
	warmupTimer := time.NewTimer(warmup)
	defer warmupTimer.Stop()
	var (
		samples  []Sample
		win      window
		rss      RSSStats
		last     = time.Now()
		runStart = last
		// Counters start from what the backlog fill left, so the first sample is a rate.
		prevPub, prevPubBytes = r.totals.published.Load(), r.totals.publishedBytes.Load()
		prevCon, prevConBytes = r.totals.consumed.Load(), r.totals.consumedBytes.Load()
	)
	rss.PID, rss.Source = r.brokerPID()
	measuring := false
	if warmup == 0 {
		r.startWindow(&win)
		win.cpu = startCPU(rss.PID)
		measuring = true
	}
	var endC <-chan time.Time
	var stretchEnd time.Time // set when the duration passed with the window short
	if measuring {
		endTimer := time.NewTimer(test)
		defer endTimer.Stop()
		endC = endTimer.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil, win, rss, ctx.Err()
		case err := <-consumeErrs:
			return nil, win, rss, fmt.Errorf("consumer: %w", err)
		case err := <-produceErrs:
			return nil, win, rss, fmt.Errorf("producer: %w", err)
		case <-warmupTimer.C:
			if !measuring {
				r.startWindow(&win)
				win.cpu = startCPU(rss.PID)
				measuring = true
				endTimer := time.NewTimer(test)
				defer endTimer.Stop()
				endC = endTimer.C
			}
		case <-endC:
			endC = nil
			if !r.windowShort(&win) {
				r.endWindow(&win, runStart)
				return samples, win, rss, nil
			}
			stretchEnd = time.Now().Add(measureStretchMax)
		case now := <-ticker.C:
			if !stretchEnd.IsZero() && (now.After(stretchEnd) || !r.windowShort(&win)) {
				r.endWindow(&win, runStart)
				return samples, win, rss, nil
			}
			interval := now.Sub(last).Seconds()
			last = now
			// now is when the tick was due: a tick that waited while the warm-up timer's
			// case ran first (both ready to a late sampler, select picks either) covers
			// warm-up only, and is marked so.
			inWindow := measuring && now.After(win.start)
			pub, pubBytes := r.totals.published.Load(), r.totals.publishedBytes.Load()
			con, conBytes := r.totals.consumed.Load(), r.totals.consumedBytes.Load()
			s := Sample{
				Seconds: now.Sub(runStart).Seconds(), Warmup: !inWindow,
				PublishMsgPerS: float64(pub-prevPub) / interval, PublishMBPerS: float64(pubBytes-prevPubBytes) / interval / 1e6,
				ConsumeMsgPerS: float64(con-prevCon) / interval, ConsumeMBPerS: float64(conBytes-prevConBytes) / interval / 1e6,
				LagMessages: pub - con,
			}
			if r.w.Consumers == 0 {
				s.LagMessages = 0
			}
			prevPub, prevPubBytes, prevCon, prevConBytes = pub, pubBytes, con, conBytes
			if bytes, err := ReadRSS(rss.PID); err == nil {
				s.BrokerRSSBytes = bytes
				if inWindow {
					if rss.FirstBytes == 0 {
						rss.FirstBytes = bytes
					}
					rss.LastBytes = bytes
					rss.MaxBytes = max(rss.MaxBytes, bytes)
				}
			}
			samples = append(samples, s)
			r.progress(s, runStart, warmup+test)
		}
	}
}

// brokerPID is the process whose memory and CPU the run samples: --broker-pid, else the
// driver's, else the process listening on the driver's address, else this process.
func (r *run) brokerPID() (int, string) {
	pid := r.opts.BrokerPID
	if pid == 0 {
		pid = r.opts.Driver.Info().BrokerPID
	}
	if pid == 0 && r.opts.Driver.Info().Address != "" {
		pid, _ = PIDListeningOn(r.opts.Driver.Info().Address)
	}
	if pid == 0 {
		return os.Getpid(), "benchmark process (driver reported no broker PID; includes the clients)"
	}
	return pid, "broker process"
}

// windowShort says whether the open window has not yet seen RunOptions.MeasuredMessagesMin
// acknowledgements and, with consumers, one message back.
func (r *run) windowShort(win *window) bool {
	if r.opts.MeasuredMessagesMin <= 0 {
		return false
	}
	if r.totals.published.Load()-win.pub0 < r.opts.MeasuredMessagesMin {
		return true
	}
	if r.w.Consumers == 0 {
		return false
	}
	for _, stats := range r.consumers {
		stats.mu.Lock()
		back := stats.endToEnd.Count()
		stats.mu.Unlock()
		if back > 0 {
			return false
		}
	}
	return true
}

// endWindow closes the measured window.
func (r *run) endWindow(win *window, runStart time.Time) {
	r.gate.on.Store(false)
	win.end = time.Now()
	win.pub1, win.pubBytes1 = r.totals.published.Load(), r.totals.publishedBytes.Load()
	win.con1, win.conBytes1 = r.totals.consumed.Load(), r.totals.consumedBytes.Load()
	win.seconds = win.end.Sub(win.start).Seconds()
	win.warmupSeconds = win.start.Sub(runStart).Seconds()
}

func (r *run) startWindow(win *window) {
	for _, stats := range r.producers {
		stats.mu.Lock()
		stats.publish, stats.publishIntended, stats.delay = NewLatency(), NewLatency(), NewLatency()
		stats.mu.Unlock()
	}
	for _, stats := range r.consumers {
		stats.mu.Lock()
		stats.endToEnd = NewLatency()
		stats.mu.Unlock()
	}
	win.start = time.Now()
	win.pub0, win.pubBytes0 = r.totals.published.Load(), r.totals.publishedBytes.Load()
	win.con0, win.conBytes0 = r.totals.consumed.Load(), r.totals.consumedBytes.Load()
	r.gate.on.Store(true)
}

func (r *run) progress(s Sample, runStart time.Time, total time.Duration) {
	if r.opts.Progress == nil {
		return
	}
	elapsed := time.Since(runStart)
	phase := "test"
	if s.Warmup {
		phase = "warmup"
	}
	r.opts.Progress.Printf("%s  pub %.0f msg/s %.1f MB/s  con %.0f msg/s %.1f MB/s  lag %d  elapsed %v  ETA %v",
		phase, s.PublishMsgPerS, s.PublishMBPerS, s.ConsumeMsgPerS, s.ConsumeMBPerS, s.LagMessages,
		elapsed.Round(time.Second), max(total-elapsed, 0).Round(time.Second))
}

// waitDrained waits until the consumers have read as many messages as were acknowledged
// (the producers' Flush waited for every outstanding acknowledgement before), checked every
// 10 ms, for at most drainTimeout: it ends as soon as they have, and runs to the bound only
// when records went missing.
func (r *run) waitDrained(ctx context.Context, consumeErrs chan error) {
	if r.w.Consumers == 0 {
		return
	}
	deadline := time.Now().Add(drainTimeout)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for r.totals.consumed.Load() < r.totals.published.Load() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-consumeErrs:
			return
		case <-ticker.C:
		}
	}
}

func (r *run) summarize(result *Result, samples []Sample, win window, rss RSSStats) {
	result.WarmupSeconds, result.TestSeconds = win.warmupSeconds, win.seconds
	result.Samples = samples
	result.Publish = throughput(win.pub1-win.pub0, win.pubBytes1-win.pubBytes0, win.seconds)
	result.Consume = throughput(win.con1-win.con0, win.conBytes1-win.conBytes0, win.seconds)
	publish, intended, delay, e2e := NewLatency(), NewLatency(), NewLatency(), NewLatency()
	for _, stats := range r.producers {
		stats.mu.Lock()
		publish.Merge(stats.publish)
		intended.Merge(stats.publishIntended)
		delay.Merge(stats.delay)
		stats.mu.Unlock()
	}
	for _, stats := range r.consumers {
		stats.mu.Lock()
		e2e.Merge(stats.endToEnd)
		stats.mu.Unlock()
	}
	result.PublishLatency = publish.Summarize()
	result.PublishLatencyIntended = intended.Summarize()
	result.PublishDelay = delay.Summarize()
	result.EndToEnd = e2e.Summarize()
	rss.GrowthBytes = rss.LastBytes - rss.FirstBytes
	result.BrokerRSS = rss
	result.BrokerCPU = win.cpu.finish(rss.PID, rss.Source, win.pubBytes1-win.pubBytes0, win.conBytes1-win.conBytes0)
	result.Errors = ErrCounts{Publish: r.totals.publishErrors.Load(), BadPayloads: r.totals.badPayloads.Load()}
	result.Totals = Totals{Published: r.totals.published.Load(), Consumed: r.totals.consumed.Load()}
	var sent int64
	for i := range r.partitionSent {
		sent += r.partitionSent[i].Load()
	}
	if sent > 0 {
		for i := range r.partitionSent {
			result.PartitionShares = append(result.PartitionShares, float64(r.partitionSent[i].Load())/float64(sent))
		}
	}
	switch {
	case r.clientPlaces:
		result.Notes = append(result.Notes, "null keys placed by the client's partitioner (partition -1): partition shares not seen by the bench")
	case r.w.KeyDistribution == KeysNone && r.w.Producers > 0:
		result.Notes = append(result.Notes, "null keys round-robin: the driver's client does not place them")
	}
	if r.w.ProducerRate == 0 {
		result.Notes = append(result.Notes, "max-rate run: no schedule, so publish delay is not measured")
	}
	if result.Backlog != nil {
		b := result.Backlog
		backlogAt, caughtUp := time.Duration(r.backlogAt.Load()), time.Duration(r.caughtUp.Load())
		b.BacklogReadSeconds = backlogAt.Seconds()
		b.CaughtUpSeconds = caughtUp.Seconds()
		b.Drained = caughtUp != 0
		if backlogAt != 0 {
			b.BacklogReadMBPerSec = float64(b.WrittenBytes) / backlogAt.Seconds() / 1e6
		}
		if end := math.Float64frombits(r.backlogCPUEnd.Load()); end > 0 && b.WrittenBytes > 0 {
			b.BrokerCPUSeconds = end - r.backlogCPU.broker0
			b.BrokerCPUPerGB = b.BrokerCPUSeconds / (float64(b.WrittenBytes) / 1e9)
		}
		if !b.Drained {
			result.Notes = append(result.Notes, "the consumers did not catch up with the live head before the test ended")
		}
	}
}

func throughput(messages, bytes int64, seconds float64) Throughput {
	t := Throughput{Messages: messages, Bytes: bytes}
	if seconds > 0 {
		t.MsgPerSec = float64(messages) / seconds
		t.MBPerSec = float64(bytes) / seconds / 1e6
	}
	return t
}
