package shard

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlog/ringlog/ring"
)

// The replication seam's partition operations: what replication/ needs to do to a
// partition on its shard when this broker follows or leads it. Each runs on the owning
// shard's loop; the blocking ones wait for it (a follower fetcher or the metadata
// reconciler calls them from a goroutine of its own, never from a shard loop, and never
// while holding a lock that a shard loop may wait for).

// onPartition runs fn with tp's partition on its shard's loop and waits for it.
func (b *Broker) onPartition(tp TopicPartition, fn func(s *Shard, p *partition) error) error {
	s, err := b.shardFor(tp)
	if err != nil {
		return err
	}
	return onShard(s, func() error {
		p := s.parts[tp]
		if p == nil {
			return fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition)
		}
		return fn(s, p)
	})
}

// LogOffsets returns tp's log start and end offsets, read on its shard.
func (b *Broker) LogOffsets(tp TopicPartition) (start, end int64, err error) {
	err = b.onPartition(tp, func(_ *Shard, p *partition) error {
		start, end = p.log.StartOffset(), p.log.EndOffset()
		return nil
	})
	return start, end, err
}

// AppendReplicated appends batches copied from tp's leader, keeping their offsets and
// leader epochs (engine.Log.AppendReplicated), and returns the log end offset after them.
// Long-polls and the flush policy see the append as they see a produce.
func (b *Broker) AppendReplicated(tp TopicPartition, batches [][]byte) (end int64, err error) {
	err = b.onPartition(tp, func(s *Shard, p *partition) error {
		res, err := p.log.AppendReplicated(batches)
		if res.Batches > 0 || err == nil {
			s.core.MarkDirty(&p.c)
			s.core.Moved(&p.c)
		}
		end = p.log.EndOffset()
		return err
	})
	return end, err
}

// ReplicatedAppend is one partition's part of AppendReplicatedAll: its batches in, the log
// end offset after them and the append's error out.
type ReplicatedAppend struct {
	TopicPartition
	Batches [][]byte
	End     int64
	Err     error
}

// AppendReplicatedAll is AppendReplicated for the partitions of one follower fetch: each
// shard's partitions are appended in one visit of its loop, the shards in parallel, and it
// returns once all are done (a fetch answer with batches for k partitions costs one loop
// wake-up per shard, not k sequential round trips). An entry without batches is left
// alone.
func (b *Broker) AppendReplicatedAll(in []ReplicatedAppend) {
	type shardPart struct {
		s   *Shard
		idx []int
	}
	var parts []shardPart
	for i := range in {
		a := &in[i]
		if len(a.Batches) == 0 {
			continue
		}
		s, err := b.shardFor(a.TopicPartition)
		if err != nil {
			a.Err = err
			continue
		}
		k := 0
		for k < len(parts) && parts[k].s != s {
			k++
		}
		if k == len(parts) {
			parts = append(parts, shardPart{s: s})
		}
		parts[k].idx = append(parts[k].idx, i)
	}
	if len(parts) == 0 {
		return
	}
	// Each shard writes its own copy of its entries and hands it back over done: a shard
	// that answers after the wait gave up touches nothing of in.
	type answer struct {
		k   int
		out []ReplicatedAppend
	}
	done := make(chan answer, len(parts))
	posted := 0
	for k, sp := range parts {
		work := make([]ReplicatedAppend, len(sp.idx))
		for j, i := range sp.idx {
			work[j] = in[i]
		}
		s := sp.s
		fn := func() {
			for j := range work {
				a := &work[j]
				p := s.parts[a.TopicPartition]
				if p == nil {
					a.Err = fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, a.Topic, a.Partition)
					continue
				}
				res, err := p.log.AppendReplicated(a.Batches)
				if res.Batches > 0 || err == nil {
					s.core.MarkDirty(&p.c)
					s.core.Moved(&p.c)
				}
				a.End, a.Err = p.log.EndOffset(), err
			}
			done <- answer{k: k, out: work}
		}
		if err := postRetrying(s, fn); err != nil {
			for _, i := range sp.idx {
				in[i].Err = err
			}
			continue
		}
		posted++
	}
	timeout := time.NewTimer(adminWaitMax)
	defer timeout.Stop()
	for got := make([]bool, len(parts)); posted > 0; posted-- {
		select {
		case a := <-done:
			got[a.k] = true
			for j, i := range parts[a.k].idx {
				in[i].End, in[i].Err = a.out[j].End, a.out[j].Err
			}
		case <-timeout.C:
			for k, sp := range parts {
				if got[k] {
					continue
				}
				for _, i := range sp.idx {
					if in[i].Err == nil {
						in[i].Err = fmt.Errorf("shard %d did not answer within %s", sp.s.index, adminWaitMax)
					}
				}
			}
			return
		}
	}
}

// postRetrying posts fn to s's loop, retrying a full mailbox every millisecond for up to
// adminWaitMax (the admin and replication paths: they wait for the mailbox to drain).
func postRetrying(s *Shard, fn func()) error {
	deadline := time.Now().Add(adminWaitMax)
	for {
		err := s.r.Post(fn)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ring.ErrMailboxFull) || time.Now().After(deadline) {
			return fmt.Errorf("shard %d: %w", s.index, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TruncateTo cuts tp's log to end before offset (a follower whose log diverged from its
// new leader's; engine.Log.TruncateTo) and returns the new log end offset.
func (b *Broker) TruncateTo(tp TopicPartition, offset int64) (end int64, err error) {
	err = b.onPartition(tp, func(_ *Shard, p *partition) error {
		err := p.log.TruncateTo(offset)
		end = p.log.EndOffset()
		return err
	})
	return end, err
}

// SetLeaderEpoch makes every later produce to tp carry epoch in its batches'
// partitionLeaderEpoch (this broker leads tp at epoch); a negative epoch keeps the
// producer's value. It survives a reopen of the log (AlterConfigs).
func (b *Broker) SetLeaderEpoch(tp TopicPartition, epoch int32) error {
	return b.onPartition(tp, func(_ *Shard, p *partition) error {
		p.leaderEpoch = epoch
		p.log.SetLeaderEpoch(epoch)
		return nil
	})
}

// FailWaiting answers every produce of tp waiting for its acknowledgement with err (this
// broker stopped leading tp: the high watermark they wait for will not come from here).
// Any goroutine; it does not wait.
func (b *Broker) FailWaiting(tp TopicPartition, err error) error {
	s, serr := b.shardFor(tp)
	if serr != nil {
		return serr
	}
	if perr := s.r.Post(func() {
		if p := s.parts[tp]; p != nil {
			s.core.FailWaiting(&p.c, err)
		}
	}); perr != nil {
		return postErr(s, perr)
	}
	return nil
}
