package shard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

var backends = []string{"uring", "syscall"}

func openBroker(t *testing.T, dir, backend string, shards int) *Broker {
	t.Helper()
	b, err := Open(Config{DataDir: dir, Shards: shards, Ring: ring.Config{Backend: backend}})
	if err != nil {
		if backend == "uring" && errors.Is(err, ring.ErrUnsupported) {
			t.Skipf("io_uring unavailable: %v", err)
		}
		t.Fatalf("open broker: %v", err)
	}
	return b
}

func buildBatch(t testing.TB, prefix string, n int) []byte {
	t.Helper()
	bl := batch.NewBuilder(batch.BuilderOptions{})
	for i := 0; i < n; i++ {
		bl.Append(time.Now().UnixMilli(), []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("%s-%d", prefix, i)), nil)
	}
	out, err := bl.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func produce(t *testing.T, b *Broker, tp TopicPartition, acks int16, batches ...[]byte) ProduceResult {
	t.Helper()
	ch := make(chan ProduceResult, 1)
	b.Produce(tp, batches, acks, func(r ProduceResult) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("produce did not complete")
	}
	return ProduceResult{}
}

func fetch(t *testing.T, b *Broker, req FetchRequest) []FetchResult {
	t.Helper()
	ch := make(chan []FetchResult, 1)
	b.Fetch(req, func(r []FetchResult) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("fetch did not complete")
	}
	return nil
}

// values decodes every record value of a fetch result (and releases it).
func values(t *testing.T, r *FetchResult) []string {
	t.Helper()
	defer r.Release()
	if r.Err != nil {
		t.Fatalf("fetch %s/%d: %v", r.Topic, r.Partition, r.Err)
	}
	data, err := r.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for len(data) > 0 {
		h, err := batch.Validate(data[:mustSize(t, data)])
		if err != nil {
			t.Fatal(err)
		}
		err = batch.Decode(data[:h.Size()], func(off, ts int64, rec *batch.Record) error {
			out = append(out, fmt.Sprintf("%d:%s", off, rec.Value))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		data = data[h.Size():]
	}
	return out
}

func mustSize(t *testing.T, b []byte) int {
	h, err := batch.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h.Size()
}

func TestProduceFetchRestart(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			b := openBroker(t, dir, backend, 2)
			if err := b.CreateTopic("orders", 4, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.CreateTopic("orders", 4, nil); !errors.Is(err, ErrTopicExists) {
				t.Fatalf("second create: %v, want ErrTopicExists", err)
			}
			used := map[int]bool{}
			for p := int32(0); p < 4; p++ {
				tp := TopicPartition{"orders", p}
				si, _ := b.ShardOf(tp)
				used[si] = true
				for i := 0; i < 3; i++ {
					r := produce(t, b, tp, AcksLeader, buildBatch(t, fmt.Sprintf("p%d-b%d", p, i), 2))
					if r.Err != nil || r.BaseOffset != int64(2*i) {
						t.Fatalf("produce p%d batch %d: %+v", p, i, r)
					}
				}
			}
			if len(used) != 2 {
				t.Fatalf("partitions placed on shards %v, want both shards used", used)
			}
			res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition{"orders", 1}, 3, 1 << 20}}})
			got := values(t, &res[0])
			// Offset 3 lands mid-batch: the whole batch holding it comes back.
			want := []string{"2:p1-b1-0", "3:p1-b1-1", "4:p1-b2-0", "5:p1-b2-1"}
			if fmt.Sprint(got) != fmt.Sprint(want) || res[0].HighWatermark != 6 {
				t.Fatalf("fetch = %v hw %d, want %v hw 6", got, res[0].HighWatermark, want)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}

			b = openBroker(t, dir, backend, 2)
			defer b.Close()
			res = fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition{"orders", 3}, 0, 1 << 20}}})
			if got := values(t, &res[0]); len(got) != 6 || got[5] != "5:p3-b2-1" {
				t.Fatalf("after restart: %v", got)
			}
			var offsets [3]int64
			for i, ts := range []int64{TimestampEarliest, TimestampLatest, 0} {
				ch := make(chan int64, 1)
				b.ListOffset(TopicPartition{"orders", 3}, ts, func(off int64, err error) {
					if err != nil {
						t.Error(err)
					}
					ch <- off
				})
				offsets[i] = <-ch
			}
			if offsets != [3]int64{0, 6, 0} {
				t.Fatalf("list offsets earliest/latest/ts0 = %v, want [0 6 0]", offsets)
			}
		})
	}
}

func TestFetchErrors(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	produce(t, b, TopicPartition{"t", 0}, AcksLeader, buildBatch(t, "x", 1))
	res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{
		{TopicPartition{"t", 0}, 5, 1024},
		{TopicPartition{"t", 7}, 0, 1024},
		{TopicPartition{"nope", 0}, 0, 1024},
	}})
	if !errors.Is(res[0].Err, engine.ErrOffsetOutOfRange) {
		t.Errorf("offset 5 of 1: %v", res[0].Err)
	}
	if !errors.Is(res[1].Err, ErrUnknownTopicOrPartition) || !errors.Is(res[2].Err, ErrUnknownTopicOrPartition) {
		t.Errorf("unknown partition/topic: %v / %v", res[1].Err, res[2].Err)
	}
	r := produce(t, b, TopicPartition{"t", 0}, AcksLeader, []byte("garbage that is not a batch at all, long enough to parse a header from it......"))
	if !errors.Is(r.Err, engine.ErrInvalidBatch) {
		t.Errorf("garbage produce: %v, want ErrInvalidBatch", r.Err)
	}
	for _, name := range []string{"", "..", "a/b", string(make([]byte, 300))} {
		if err := b.CreateTopic(name, 1, nil); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("create %q: %v, want ErrInvalidTopic", name, err)
		}
	}
	if err := b.CreateTopic("z", 0, nil); !errors.Is(err, ErrInvalidPartitions) {
		t.Errorf("0 partitions: %v", err)
	}
	if err := b.CreateTopic("z", 1, map[string]string{"segment.bytes": "banana"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad config: %v", err)
	}
}

func TestLongPollWakesOnProduce(t *testing.T) {
	b := openBroker(t, t.TempDir(), "uring", 2)
	defer b.Close()
	if err := b.CreateTopic("t", 2, nil); err != nil {
		t.Fatal(err)
	}
	ch := make(chan []FetchResult, 1)
	b.Fetch(FetchRequest{
		Partitions: []FetchPartition{{TopicPartition{"t", 0}, 0, 1 << 20}, {TopicPartition{"t", 1}, 0, 1 << 20}},
		MinBytes:   1, MaxWait: time.Minute,
	}, func(r []FetchResult) { ch <- r })
	select {
	case <-ch:
		t.Fatal("long-poll answered before any data")
	default:
	}
	produce(t, b, TopicPartition{"t", 1}, AcksLeader, buildBatch(t, "late", 1))
	select {
	case r := <-ch:
		if got := values(t, &r[1]); len(got) != 1 || got[0] != "0:late-0" {
			t.Fatalf("woken fetch got %v", got)
		}
		r[0].Release()
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not woken by produce")
	}

	// A long-poll with no data ends at MaxWait with an empty answer.
	start := time.Now()
	r := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition{"t", 0}, 0, 1024}}, MinBytes: 1, MaxWait: 20 * time.Millisecond})
	if r[0].Err != nil || r[0].Records.Size != 0 || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("timed-out long-poll: %+v after %s", r[0], time.Since(start))
	}
}

func TestAcksAllAndFlushAlways(t *testing.T) {
	b := openBroker(t, t.TempDir(), "uring", 1)
	defer b.Close()
	if err := b.CreateTopic("durable", 1, map[string]string{"flush.always": "true"}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("replicated", 1, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"durable", 0}
	// Many produces in flight at once share fdatasyncs (group commit); all are acknowledged.
	const n = 64
	ch := make(chan ProduceResult, n)
	for i := 0; i < n; i++ {
		b.Produce(tp, [][]byte{buildBatch(t, "d", 1)}, AcksAll, func(r ProduceResult) { ch <- r })
	}
	seen := map[int64]bool{}
	for i := 0; i < n; i++ {
		r := <-ch
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		seen[r.BaseOffset] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct offsets acknowledged, want %d", len(seen), n)
	}
	_, states, err := b.DescribeTopic("durable")
	if err != nil || states[0].HighWatermark != n || states[0].LogEndOffset != n {
		t.Fatalf("describe: %+v %v", states, err)
	}
	r := produce(t, b, TopicPartition{"replicated", 0}, AcksAll, buildBatch(t, "r", 1))
	if !errors.Is(r.Err, ErrNotEnoughReplicas) {
		t.Fatalf("acks=all with min.insync.replicas=2 on one broker: %v", r.Err)
	}
	if r := produce(t, b, TopicPartition{"replicated", 0}, AcksLeader, buildBatch(t, "r", 1)); r.Err != nil {
		t.Fatalf("acks=1 on the same topic: %v", r.Err)
	}
}

func TestDeleteAndAlterTopic(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, "syscall", 2)
	if err := b.CreateTopic("gone", 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("kept", 1, nil); err != nil {
		t.Fatal(err)
	}
	produce(t, b, TopicPartition{"gone", 0}, AcksLeader, buildBatch(t, "g", 1))
	if err := b.DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "gone-0")); !os.IsNotExist(err) {
		t.Fatalf("partition dir survived delete: %v", err)
	}
	if r := produce(t, b, TopicPartition{"gone", 0}, AcksLeader, buildBatch(t, "g", 1)); !errors.Is(r.Err, ErrUnknownTopicOrPartition) {
		t.Fatalf("produce to deleted topic: %v", r.Err)
	}
	if err := b.AlterTopicConfig("kept", map[string]string{"retention.ms": "1000"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.AlterTopicConfig("kept", map[string]string{"retention.ms": "soon"}, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad alter: %v", err)
	}
	b.Close()
	b = openBroker(t, dir, "syscall", 3) // a different shard count remaps placement
	defer b.Close()
	topics := userTopics(b)
	if len(topics) != 1 || topics[0].Name != "kept" || topics[0].Config["retention.ms"] != "1000" {
		t.Fatalf("catalog after restart: %+v", topics)
	}
}

// A caller that claims to run on a shard's loop but does not (a mis-wired driver) must not
// touch the shard's state from its own thread: the request is posted as for any caller.
func TestProduceFromWrongThreadIsPosted(t *testing.T) {
	b := openBroker(t, t.TempDir(), "uring", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	ch := make(chan ProduceResult, 1)
	b.ProduceFrom(0, TopicPartition{"t", 0}, [][]byte{buildBatch(t, "x", 1)}, AcksLeader, func(r ProduceResult) { ch <- r })
	if r := <-ch; r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("produce: %+v", r)
	}
	if n := b.shards[0].r.ForeignFileIO(); n != 0 {
		t.Fatalf("%d file ops ran off the shard's thread", n)
	}
	ok := make(chan bool, 1)
	if err := b.Exec(0, func(r *ring.Reactor) error { ok <- r.OnOwnerThread(); return nil }); err != nil || !<-ok {
		t.Fatalf("Exec did not run on the shard's loop thread (err %v)", err)
	}
}

// Describe-configs reports the value in force for every key: the topic's own where set,
// else the engine's default as OpenLog resolves it.
func TestEffectiveConfig(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 1, map[string]string{"retention.ms": "1000"}); err != nil {
		t.Fatal(err)
	}
	got := b.EffectiveConfig(b.Topic("t"))
	want := map[string]string{"retention.ms": "1000", "segment.bytes": "1073741824", "retention.bytes": "-1",
		"index.interval.bytes": "4096", "storage.mode": "page-cache", "flush.always": "false", "min.insync.replicas": "1",
		"cleanup.policy": "delete", "delete.retention.ms": "86400000", "min.cleanable.dirty.ratio": "0.5",
		"max.message.bytes": "1073741824"} // unset: segment.bytes bounds a batch
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// userTopics is b's topics without the internal ones (__consumer_offsets).
func userTopics(b *Broker) []*Topic {
	return slices.DeleteFunc(b.Topics(), func(t *Topic) bool { return internalTopic(t.Name) })
}
