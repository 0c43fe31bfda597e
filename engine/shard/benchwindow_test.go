package shard

import (
	"sync"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// TestProduceWindowRetriesThrottled: the benchmarks' produce window (produceWindow) retries
// a produce that the shard's full mailbox refused with ErrThrottled, instead of failing the
// run (session 15: BenchmarkDirectAppend at 16 KiB keeps as many produces in flight as a
// mailbox holds, and failed when one shard's mailbox collected them beside the probe's
// post). The shard's loop is held in an Exec while the window fills its 8-entry mailbox;
// every produce must then be written once, in the order of its partition's offsets.
func TestProduceWindowRetriesThrottled(t *testing.T) {
	const mailbox, window, produces, records = 8, 32, 64, 2
	br, err := Open(Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto", MailboxEntries: mailbox}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	if err := br.CreateTopic("window", 1, nil); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"window", 0}
	bufs := make([][]byte, window)
	for i := range bufs {
		bufs[i] = benchBatch(t, records, 16)
	}
	var once sync.Once
	held, release := make(chan struct{}), make(chan struct{})
	unhold := func() { once.Do(func() { close(release) }) }
	w := newProduceWindow(br, bufs, func(i int) TopicPartition {
		if i == mailbox+1 { // produce number mailbox, the first past the full mailbox, was refused by now
			unhold()
		}
		return tp
	}, AcksLeader)
	w.onWait = unhold // the mailbox refused one, and its retry waits for an answer

	execDone := make(chan error, 1)
	go func() {
		execDone <- br.Exec(0, func(*ring.Reactor) error { close(held); <-release; return nil })
	}()
	<-held // the loop drains no mailbox until release
	if err := w.run(produces); err != nil {
		t.Fatalf("produce window: %v", err)
	}
	if err := <-execDone; err != nil {
		t.Fatal(err)
	}
	if w.throttled == 0 {
		t.Fatalf("no produce was refused with %d in flight and a mailbox of %d", window, mailbox)
	}
	_, states, err := br.DescribeTopic("window")
	if err != nil {
		t.Fatal(err)
	}
	if got := states[0].LogEndOffset; got != produces*records {
		t.Fatalf("log end %d after %d produces of %d records (%d refusals retried)", got, produces, records, w.throttled)
	}
	t.Logf("%d refusals by the full mailbox (each retried) for %d produces", w.throttled, produces)
}
