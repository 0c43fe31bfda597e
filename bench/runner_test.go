package bench

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func memWorkload() Workload {
	w := Workload{
		Name: "t", Topics: 2, PartitionsPerTopic: 4, MessageSize: 256, KeyDistribution: KeysRandom,
		Producers: 1, Consumers: 2, ProducerRate: 4000, Warmup: Duration(50 * time.Millisecond),
		Duration: Duration(300 * time.Millisecond),
	}
	w.fillDefaults()
	return w
}

// TestRunFixedRateOnMemDriver runs the whole framework (topics, producers on a schedule,
// consumers, sampling, summaries) against the in-process driver. What the 300 ms window
// holds depends on the CPU the run got (a starved producer catches up, a starved consumer
// reads in the drain, a starved sampler takes fewer samples): the checks are the schedule's
// ceiling and the run's totals, and the window's counts are logged.
func TestRunFixedRateOnMemDriver(t *testing.T) {
	w := memWorkload()
	started := time.Now()
	result, err := Run(context.Background(), RunOptions{Workload: w, Driver: NewMemDriver(), SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(started)
	inWindow := 0
	for _, s := range result.Samples {
		if !s.Warmup {
			inWindow++
		}
	}
	t.Logf("window %.3f s: published %d (%d scheduled), consumed %d; samples %d (%d in the window); run %v, %d published, %d consumed",
		result.TestSeconds, result.Publish.Messages, int(float64(w.ProducerRate)*result.TestSeconds), result.Consume.Messages,
		len(result.Samples), inWindow, elapsed.Round(time.Millisecond), result.Totals.Published, result.Totals.Consumed)
	// A fixed rate: message n is due at start + n/rate, so by the time Run returned no
	// producer can have sent more than its share of rate × elapsed, plus the one due at 0.
	if ceiling := int64(float64(w.ProducerRate)*elapsed.Seconds()) + int64(w.Producers*w.Topics); result.Totals.Published > ceiling {
		t.Fatalf("published %d in %v at %d msg/s: the schedule ran ahead (at most %d)", result.Totals.Published, elapsed, w.ProducerRate, ceiling)
	}
	if !result.AllDelivered() || result.Totals.Published < result.Publish.Messages {
		t.Fatalf("totals %+v (window published %d): every message must come back", result.Totals, result.Publish.Messages)
	}
	// Latencies are recorded for sends (and reads) inside the window: acknowledgements in it
	// past what was in flight when it opened come from sends in it.
	if result.Publish.Messages > int64(w.MaxInFlight*w.Producers*w.Topics) && (result.PublishDelay.Count == 0 || result.PublishLatency.Count == 0) ||
		result.Consume.Messages > 0 && result.EndToEnd.Count == 0 {
		t.Fatalf("missing histograms: delay %d e2e %d publish %d (window published %d, consumed %d)", result.PublishDelay.Count,
			result.EndToEnd.Count, result.PublishLatency.Count, result.Publish.Messages, result.Consume.Messages)
	}
	if result.Errors.Publish != 0 || result.Errors.BadPayloads != 0 {
		t.Fatalf("errors %+v", result.Errors)
	}
	// The sampler's first tick is due with the warm-up's end: it covers warm-up only, even
	// when a late sampler ran the warm-up timer's case first.
	if len(result.Samples) == 0 || !result.Samples[0].Warmup || inWindow > 0 && result.BrokerRSS.MaxBytes == 0 || result.Hardware.Cores == 0 {
		t.Fatalf("samples %d (%d in the window) rss %+v", len(result.Samples), inWindow, result.BrokerRSS)
	}
	if c := result.BrokerCPU; c.PID != os.Getpid() || strings.HasPrefix(c.Source, "unavailable") || c.BrokerSeconds < 0 || c.BrokerSeconds != c.BenchSeconds {
		t.Fatalf("cpu %+v: the mem driver's broker is this process", c)
	}
	total := 0.0
	for _, share := range result.PartitionShares {
		total += share
	}
	if len(result.PartitionShares) != w.PartitionsPerTopic || total < 0.999 || total > 1.001 {
		t.Fatalf("partition shares %v", result.PartitionShares)
	}
}

func TestRunCatchUpReportsDrain(t *testing.T) {
	w := memWorkload()
	w.Topics, w.Consumers, w.BacklogSize, w.Warmup = 1, 1, 4<<20, 0
	w.Duration = Duration(500 * time.Millisecond)
	result, err := Run(context.Background(), RunOptions{Workload: w, Driver: NewMemDriver(), SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := result.Backlog
	if b == nil || b.WrittenBytes < 4<<20 || b.WrittenMessages < (4<<20)/256 {
		t.Fatalf("backlog %+v", b)
	}
	if !b.Drained || b.BacklogReadSeconds <= 0 || b.CaughtUpSeconds < b.BacklogReadSeconds || b.BacklogReadMBPerSec <= 0 {
		t.Fatalf("drain not reported: %+v", b)
	}
	// The backlog was written before sampling started; no sample may count it as a rate.
	for _, sample := range result.Samples {
		if sample.PublishMsgPerS > 10*float64(w.ProducerRate) {
			t.Fatalf("sample at %.2fs shows %.0f msg/s published at a 4000 msg/s schedule", sample.Seconds, sample.PublishMsgPerS)
		}
	}
}

func TestRunHotKeyShowsSkew(t *testing.T) {
	w := memWorkload()
	w.KeyDistribution, w.HotKeyShare, w.Warmup = KeysHot, 0.9, 0
	result, err := Run(context.Background(), RunOptions{Workload: w, Driver: NewMemDriver(), SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hottest := 0.0
	for _, share := range result.PartitionShares {
		hottest = max(hottest, share)
	}
	if hottest < 0.85 {
		t.Fatalf("hottest partition took %.2f with a 0.9 hot-key share: %v", hottest, result.PartitionShares)
	}
	var out strings.Builder
	if err := WriteSummary(&out, result); err != nil || !strings.Contains(out.String(), "hottest partition") {
		t.Fatalf("summary lacks the skew: %v\n%s", err, out.String())
	}
}

func TestRunRejectsBadWorkloadAndMissingDriver(t *testing.T) {
	if _, err := Run(context.Background(), RunOptions{Workload: Workload{}, Driver: NewMemDriver()}); err == nil {
		t.Fatal("ran an empty workload")
	}
	if _, err := Run(context.Background(), RunOptions{Workload: memWorkload()}); err == nil {
		t.Fatal("ran without a driver")
	}
	if _, err := OpenDriver("no-such-driver", "", memWorkload()); err == nil {
		t.Fatal("opened an unknown driver")
	}
}

func TestLoopbackBandwidth(t *testing.T) {
	mbps, err := LoopbackBandwidth(context.Background(), 100*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Real loopback TCP moves GB/s, but what 100 ms moves depends on the CPU the test got
	// (2.8 MB/s at load 15 on 2 vCPUs): the check is that bytes went through (no error).
	t.Logf("loopback %.1f MB/s", mbps)
	if mbps <= 0 {
		t.Fatalf("loopback %.1f MB/s", mbps)
	}
	if _, err := LoopbackBandwidth(context.Background(), time.Second, 0); err == nil {
		t.Fatal("accepted 0 streams")
	}
}

// placingDriver is the mem driver behind a client that places null keys itself: it counts
// the sends that arrive with partition -1 and puts them on partition 0.
type placingDriver struct {
	*MemDriver
	placed, chosen atomic.Int64
	opened         atomic.Bool // a producer was opened with ClientPlacesNullKeys
}

func (d *placingDriver) PlacesNullKeys() bool { return true }

func (d *placingDriver) NewProducer(ctx context.Context, topic string, opts ProducerOptions) (Producer, error) {
	p, err := d.MemDriver.NewProducer(ctx, topic, opts)
	if err != nil {
		return nil, err
	}
	if opts.ClientPlacesNullKeys {
		d.opened.Store(true)
	}
	return &placingProducer{Producer: p, d: d}, nil
}

type placingProducer struct {
	Producer
	d *placingDriver
}

func (p *placingProducer) Send(partition int, key, value []byte, done func(error)) error {
	if partition == -1 {
		p.d.placed.Add(1)
		partition = 0
	} else {
		p.d.chosen.Add(1)
	}
	return p.Producer.Send(partition, key, value, done)
}

// keyDistribution none hands null keys to a client that places them (partition -1), and
// picks round-robin for one that does not; roundrobin always picks.
func TestNullKeysPlacedByTheClient(t *testing.T) {
	for _, c := range []struct {
		distribution   string
		placed, chosen bool
	}{{KeysNone, true, false}, {KeysRoundRobin, false, true}} {
		w := memWorkload()
		w.KeyDistribution = c.distribution
		d := &placingDriver{MemDriver: NewMemDriver()}
		result, err := Run(context.Background(), RunOptions{Workload: w, Driver: d, SampleInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if placed, chosen := d.placed.Load() > 0, d.chosen.Load() > 0; placed != c.placed || chosen != c.chosen || d.opened.Load() != c.placed {
			t.Fatalf("%s: %d sends with partition -1, %d chosen by the bench, producer opened to place: %v", c.distribution, d.placed.Load(), d.chosen.Load(), d.opened.Load())
		}
		if !result.AllDelivered() || (len(result.PartitionShares) > 0) == c.placed {
			t.Fatalf("%s: totals %+v, shares %v", c.distribution, result.Totals, result.PartitionShares)
		}
	}
	w := memWorkload()
	w.KeyDistribution = KeysNone
	result, err := Run(context.Background(), RunOptions{Workload: w, Driver: NewMemDriver(), SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i, share := range result.PartitionShares {
		if share < 0.2 || share > 0.3 {
			t.Fatalf("none on a driver that cannot place: partition %d took %.2f of the messages, want round-robin's 0.25", i, share)
		}
	}
}

// TestRunTopicSuffixReusesTopics: with a TopicSuffix, a second run on the same driver
// reuses the first run's topic; without one, each run creates its own.
func TestRunTopicSuffixReusesTopics(t *testing.T) {
	w := memWorkload()
	w.Consumers = 0
	d := NewMemDriver()
	for range 2 {
		if _, err := Run(context.Background(), RunOptions{Workload: w, Driver: d, SampleInterval: 50 * time.Millisecond, TopicSuffix: "warm"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.topics) != w.Topics {
		t.Fatalf("%d topics after two runs with a suffix, want %d", len(d.topics), w.Topics)
	}
	if _, ok := d.topics["bench-"+w.Name+"-warm-0"]; !ok {
		t.Fatalf("topics %v: want bench-%s-warm-0", d.topics, w.Name)
	}
	if _, err := Run(context.Background(), RunOptions{Workload: w, Driver: d, SampleInterval: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if len(d.topics) != 2*w.Topics {
		t.Fatalf("%d topics after a run without a suffix, want %d", len(d.topics), 2*w.Topics)
	}
}

// heldAckDriver is the in-process driver with every acknowledgement held until release
// closes: a broker that answers nothing within the measured duration.
type heldAckDriver struct {
	*MemDriver
	release chan struct{}
}

func (d heldAckDriver) NewProducer(ctx context.Context, topic string, opts ProducerOptions) (Producer, error) {
	p, err := d.MemDriver.NewProducer(ctx, topic, opts)
	return heldAckProducer{p, d.release}, err
}

type heldAckProducer struct {
	Producer
	release chan struct{}
}

func (p heldAckProducer) Send(partition int, key, value []byte, done func(error)) error {
	return p.Producer.Send(partition, key, value, func(err error) {
		go func() { <-p.release; done(err) }()
	})
}

// MeasuredMessagesMin keeps a window that saw no acknowledgement open past its duration
// until one arrives; without it, this window (acks released only after twice its
// duration) measures nothing.
func TestRunStretchesAnEmptyWindow(t *testing.T) {
	w := memWorkload()
	w.Topics, w.Warmup, w.Duration = 1, 0, Duration(100*time.Millisecond)
	driver := heldAckDriver{NewMemDriver(), make(chan struct{})}
	time.AfterFunc(2*w.Duration.D(), func() { close(driver.release) })
	result, err := Run(context.Background(), RunOptions{Workload: w, Driver: driver, SampleInterval: 10 * time.Millisecond, MeasuredMessagesMin: 1})
	if err != nil {
		t.Fatal(err)
	}
	if result.Publish.Messages < 1 || result.EndToEnd.Count == 0 {
		t.Fatalf("window of %.3f s: published %d, e2e %d; want it stretched to the first ack",
			result.TestSeconds, result.Publish.Messages, result.EndToEnd.Count)
	}
	if !result.AllDelivered() {
		t.Fatalf("totals %+v", result.Totals)
	}
}

// DefaultMeasuredMessagesMin: 100 at max rate; for a paced workload at most half of what
// its schedule sends in the window, and at least 1.
func TestDefaultMeasuredMessagesMin(t *testing.T) {
	for _, c := range []struct {
		rate     int
		duration time.Duration
		want     int64
	}{
		{0, time.Second, 100},
		{50_000, 10 * time.Second, 100},
		{50, time.Second, 25},
		{1, 500 * time.Millisecond, 1},
	} {
		w := Workload{ProducerRate: c.rate, Duration: Duration(c.duration)}
		if got := DefaultMeasuredMessagesMin(w); got != c.want {
			t.Errorf("rate %d for %v: %d, want %d", c.rate, c.duration, got, c.want)
		}
	}
}
