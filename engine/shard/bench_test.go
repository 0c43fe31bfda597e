package shard

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// benchWindow is how many produces a benchmark keeps in flight: enough for group commit to
// share each fdatasync among many of them.
const benchWindow = 64

func benchBatch(b testing.TB, records, valueBytes int) []byte {
	bl := batch.NewBuilder(batch.BuilderOptions{})
	value := make([]byte, valueBytes)
	for i := 0; i < records; i++ {
		bl.Append(time.Now().UnixMilli(), nil, value, nil)
	}
	out, err := bl.Build(nil)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkBrokerCoreProduce: 16 KiB batches (16 records of 1 KiB) into one partition
// through Broker.Produce, benchWindow in flight. acks=1 is answered after the write;
// acks=all waits for the pipelined group-commit fdatasync (the sync-produce path).
func BenchmarkBrokerCoreProduce(b *testing.B) {
	for _, c := range []struct {
		name string
		acks int16
	}{{"acks=1", AcksLeader}, {"acks=all", AcksAll}} {
		b.Run(c.name, func(b *testing.B) {
			br, err := Open(Config{DataDir: b.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			if err := br.CreateTopic("bench", 1, nil); err != nil {
				b.Fatal(err)
			}
			benchProduceWindow(b, br, benchWindow, 16, func(int) TopicPartition { return TopicPartition{"bench", 0} }, c.acks)
		})
	}
}

// benchProduceWindow runs b.N produces of one batch of records × 1 KiB each, to the
// partition tp(i) picks, keeping up to window produces waiting for their answer (a slot's
// batch is reused only once its produce was answered: the log rewrites it in place).
func benchProduceWindow(b *testing.B, br *Broker, window, records int, tp func(i int) TopicPartition, acks int16) {
	benchProduceWindowWarm(b, br, window, records, tp, acks, 0, nil)
}

// benchProduceWindowWarm is benchProduceWindow after warmup untimed produces (the same
// partitions in turn), e.g. to bring logs to a steady state of rolls and retention.
// When probe is set, it observes the timed part (probe.start before it, probe.stop after).
// Produces the shard's mailbox refused and retried (produceWindow) are reported as
// "throttled" when there were any.
func benchProduceWindowWarm(b *testing.B, br *Broker, window, records int, tp func(i int) TopicPartition, acks int16, warmup int, probe *benchProbe) {
	bufs := make([][]byte, window)
	for i := range bufs {
		bufs[i] = benchBatch(b, records, 1024)
	}
	w := newProduceWindow(br, bufs, tp, acks)
	if err := w.run(warmup); err != nil {
		b.Fatal(err)
	}
	warmThrottled := w.throttled
	b.SetBytes(int64(len(bufs[0])))
	b.ReportAllocs()
	probe.expect(b.N)
	if probe != nil { // the timed produces' latency, from their first submission
		w.starts, w.observe = make([]time.Time, window), probe.observe
	}
	b.ResetTimer()
	probe.start(b, br)
	err := w.run(b.N)
	b.StopTimer()
	probe.stop(b, br)
	if err != nil {
		b.Fatal(err)
	}
	if n := w.throttled - warmThrottled; n > 0 {
		b.ReportMetric(float64(n), "throttled")
	}
}

// produceWindow keeps up to len(bufs) produces in flight through Broker.Produce, each slot
// with its batch (a slot's batch is reused only once its produce was answered: the log
// rewrites it in place).
//
// A produce refused with ErrThrottled (the shard's mailbox was full) is retried, as a
// client retries a throttled produce, each retry after another produce was answered: a
// window can hold as many produces as a mailbox holds posts (BenchmarkDirectAppend at
// 16 KiB: 64 MiB / 16 KiB = 4096 slots, ring.Config.MailboxEntries' default 4096), and a
// shard whose thread waits for its CPU collects the whole window in its mailbox while the
// other shard answers its share, so the probe's Exec posts beside them found it full and a
// produce failed (session 15: the hidden produce error of session 14's churn-recycle
// 16 KiB run). A retry never waits forever: a refusal means the mailbox holds produces,
// and each of those is answered. One goroutine calls run.
type produceWindow struct {
	br      *Broker
	bufs    [][]byte
	tp      func(i int) TopicPartition
	acks    int16
	free    chan int            // slots whose produce was answered
	refused chan refusedProduce // produces refused with ErrThrottled, to retry
	fail    chan error          // the first other produce error
	spare   []int               // free slots held back while a refused produce waits
	onWait  func()              // tests: called before a retry waits for an answer
	observe func(time.Duration) // when set, each produce's latency from its first submission
	starts  []time.Time         // by slot, with observe
	// throttled counts the refusals (a produce refused again on its retry counts again).
	throttled int
}

type refusedProduce struct{ slot, index int }

func newProduceWindow(br *Broker, bufs [][]byte, tp func(i int) TopicPartition, acks int16) *produceWindow {
	w := &produceWindow{br: br, bufs: bufs, tp: tp, acks: acks, free: make(chan int, len(bufs)),
		refused: make(chan refusedProduce, len(bufs)), fail: make(chan error, 1)}
	for i := range bufs {
		w.free <- i
	}
	return w
}

// run issues n produces, to the partitions tp(0) .. tp(n-1), and returns once every one
// was answered, with the first error other than a mailbox's refusal.
func (w *produceWindow) run(n int) error {
	for i := 0; i < n; i++ {
		slot := <-w.free
		if w.observe != nil {
			w.starts[slot] = time.Now()
		}
		w.submit(i, slot)
		w.retryRefused()
	}
	w.retryRefused()
	for i := 0; i < len(w.bufs); i++ {
		<-w.free
	}
	for i := range w.bufs {
		w.free <- i
	}
	select {
	case err := <-w.fail:
		return err
	default:
		return nil
	}
}

func (w *produceWindow) submit(index, slot int) {
	w.br.Produce(w.tp(index), w.bufs[slot:slot+1], w.acks, func(r ProduceResult) {
		switch {
		case errors.Is(r.Err, ErrThrottled):
			w.refused <- refusedProduce{slot, index}
			return
		case r.Err != nil:
			select {
			case w.fail <- fmt.Errorf("produce %d: %w", index, r.Err):
			default:
			}
		}
		if w.observe != nil {
			w.observe(time.Since(w.starts[slot]))
		}
		w.free <- slot
	})
}

// retryRefused retries every refused produce, each once another produce was answered.
func (w *produceWindow) retryRefused() {
	for {
		select {
		case p := <-w.refused:
			w.throttled++
			if w.onWait != nil {
				w.onWait()
			}
			w.spare = append(w.spare, <-w.free)
			w.submit(p.index, p.slot)
		default:
			for _, slot := range w.spare {
				w.free <- slot
			}
			w.spare = w.spare[:0]
			return
		}
	}
}

// BenchmarkBrokerCoreLongPoll: a long-poll fetch parks on an empty partition end and one
// produce wakes it (park, high-watermark move, final read), one cycle per iteration.
func BenchmarkBrokerCoreLongPoll(b *testing.B) {
	br, err := Open(Config{DataDir: b.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := br.CreateTopic("bench", 1, nil); err != nil {
		b.Fatal(err)
	}
	tp := TopicPartition{"bench", 0}
	buf := benchBatch(b, 1, 1024)
	fetched := make(chan []FetchResult, 1)
	produced := make(chan ProduceResult, 1)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br.Fetch(FetchRequest{Partitions: []FetchPartition{{tp, int64(i), 1 << 20}}, MinBytes: 1, MaxWait: time.Minute},
			func(r []FetchResult) { fetched <- r })
		br.Produce(tp, [][]byte{buf}, AcksLeader, func(r ProduceResult) { produced <- r })
		if r := <-produced; r.Err != nil {
			b.Fatal(r.Err)
		}
		r := <-fetched
		if r[0].Err != nil || r[0].Records.Size == 0 {
			b.Fatal(fmt.Sprintf("fetch %d: %+v", i, r[0]))
		}
		r[0].Release()
	}
}
