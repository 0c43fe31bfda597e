package shard

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// replicatedBatch is a batch of n records as a follower copies it: at base offset base.
func replicatedBatch(t *testing.T, base int64, n int) []byte {
	t.Helper()
	out := buildBatch(t, "r", n)
	batch.SetBaseOffset(out, base)
	return out
}

// TestAppendReplicatedAll: the partitions of one follower fetch are appended with one
// visit of each shard's loop (a shard holding two of them gets one message in its
// mailbox), the shards in parallel (a held shard does not delay another's appends), each
// entry reporting its own log end offset or error, and an entry without batches is left
// alone.
func TestAppendReplicatedAll(t *testing.T) {
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 2, Ring: ring.Config{Backend: "syscall"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic("t", 8, nil); err != nil {
		t.Fatal(err)
	}
	// Two partitions on shard 0, one on shard 1.
	var on0, on1 []TopicPartition
	for p := range int32(8) {
		tp := TopicPartition{Topic: "t", Partition: p}
		si, err := b.ShardOf(tp)
		if err != nil {
			t.Fatal(err)
		}
		if si == 0 {
			on0 = append(on0, tp)
		} else {
			on1 = append(on1, tp)
		}
	}
	if len(on0) < 2 || len(on1) < 1 {
		t.Fatalf("partitions per shard: %d and %d, want at least 2 and 1", len(on0), len(on1))
	}
	in := []ReplicatedAppend{
		{TopicPartition: on0[0], Batches: [][]byte{replicatedBatch(t, 0, 2), replicatedBatch(t, 2, 3)}},
		{TopicPartition: on1[0], Batches: [][]byte{replicatedBatch(t, 0, 1)}},
		{TopicPartition: on0[1], Batches: [][]byte{replicatedBatch(t, 0, 4)}},
		{TopicPartition: TopicPartition{Topic: "t", Partition: 99}, Batches: [][]byte{replicatedBatch(t, 0, 1)}},
		{TopicPartition: on1[0], End: -7}, // no batches: untouched
	}

	// Hold shard 0's loop: the call posts to it once for both of its partitions, and
	// shard 1's append is done meanwhile.
	s0 := b.shards[0]
	held, release := make(chan struct{}), make(chan struct{})
	if err := s0.r.Post(func() { close(held); <-release }); err != nil {
		t.Fatal(err)
	}
	<-held
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhold) // before the broker's Close (cleanups run last first)
	returned := make(chan struct{})
	go func() {
		b.AppendReplicatedAll(in)
		close(returned)
	}()
	waitFor(t, func() bool { // shard 1 appends while shard 0 is held
		_, end, err := b.LogOffsets(on1[0])
		return err == nil && end == 1
	})
	waitFor(t, func() bool { return s0.r.MailboxDepth() == 1 })
	select {
	case <-returned:
		t.Fatal("AppendReplicatedAll returned while a shard it appends to was held")
	default:
	}
	if d := s0.r.MailboxDepth(); d != 1 {
		t.Fatalf("shard 0 holds %d messages for two partitions' appends, want 1 (one visit per shard)", d)
	}
	unhold()
	<-returned

	want := []struct {
		end int64
		err bool
	}{{5, false}, {1, false}, {4, false}, {0, true}, {-7, false}}
	for i, w := range want {
		if in[i].End != w.end || (in[i].Err != nil) != w.err {
			t.Errorf("entry %d (%s/%d): end %d err %v, want end %d, error %v", i, in[i].Topic, in[i].Partition, in[i].End, in[i].Err, w.end, w.err)
		}
	}
	if !errors.Is(in[3].Err, ErrUnknownTopicOrPartition) {
		t.Errorf("unknown partition: %v, want ErrUnknownTopicOrPartition", in[3].Err)
	}
}

// waitFor polls cond (every millisecond, at most 10 s): the loops run on their own
// threads, and the test waits for what they did, not for a duration.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
