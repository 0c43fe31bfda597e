package shard

import (
	"fmt"
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
