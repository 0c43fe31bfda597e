package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// benchWindow is how many produces a benchmark keeps in flight: enough for group commit to
// share each fdatasync among many of them.
const benchWindow = 64

func benchBatch(b *testing.B, records, valueBytes int) []byte {
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
func benchProduceWindowWarm(b *testing.B, br *Broker, window, records int, tp func(i int) TopicPartition, acks int16, warmup int, probe *benchProbe) {
	bufs := make([][]byte, window)
	free := make(chan int, window)
	for i := range bufs {
		bufs[i] = benchBatch(b, records, 1024)
		free <- i
	}
	fail := make(chan error, 1)
	starts := make([]time.Time, window) // the timed produces' start, by slot (probe only)
	timed := false
	produce := func(n int) {
		for i := 0; i < n; i++ {
			slot := <-free
			if timed && probe != nil {
				starts[slot] = time.Now()
			}
			br.Produce(tp(i), bufs[slot:slot+1], acks, func(r ProduceResult) {
				if r.Err != nil {
					select {
					case fail <- r.Err:
					default:
					}
				}
				if timed && probe != nil {
					probe.observe(time.Since(starts[slot]))
				}
				free <- slot
			})
		}
		for i := 0; i < window; i++ {
			<-free
		}
		for i := 0; i < window; i++ {
			free <- i
		}
	}
	produce(warmup)
	b.SetBytes(int64(len(bufs[0])))
	b.ReportAllocs()
	probe.expect(b.N)
	timed = true
	b.ResetTimer()
	probe.start(b, br)
	produce(b.N)
	b.StopTimer()
	probe.stop(b, br)
	select {
	case err := <-fail:
		b.Fatal(err)
	default:
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
