package isr

import (
	"errors"
	"fmt"
)

// ErrBatchOutOfOrder is returned by Follower.Appended for a batch that does not start at the
// follower's log end offset or carries an epoch older than the log's latest.
var ErrBatchOutOfOrder = errors.New("replicated batch out of order")

// FollowerPhase is where a follower is in its life after a leader change.
type FollowerPhase int

const (
	// Truncating: the follower must ask the leader OffsetsForLeaderEpoch and truncate
	// before it fetches (KIP-101).
	Truncating FollowerPhase = iota
	// Fetching: the log is a prefix of the leader's; fetch from the log end offset.
	Fetching
)

func (p FollowerPhase) String() string {
	if p == Truncating {
		return "truncating"
	}
	return "fetching"
}

// EpochRequest is the OffsetsForLeaderEpoch question a follower sends the leader: where
// does your log stop holding records of Epoch?
type EpochRequest struct {
	CurrentLeaderEpoch int32
	Epoch              int32
}

// BatchEpoch describes one replicated batch: records [BaseOffset, EndOffset) appended by the
// leader of Epoch.
type BatchEpoch struct {
	Epoch      int32
	BaseOffset int64
	EndOffset  int64
}

// Follower is the state of one partition replica following a leader: its log end offset,
// its high watermark, its epoch cache and whether it must truncate first. Like Leader it is
// a deterministic state machine; the driver sends the requests it names and applies the
// truncations it decides. Not safe for concurrent use.
type Follower struct {
	self        ReplicaID
	leader      ReplicaID
	leaderEpoch int32
	leo         int64
	hwm         int64
	epochs      *EpochCache
	phase       FollowerPhase
}

// NewFollower starts following leader at leaderEpoch with a log ending at logEndOffset and
// the epoch cache epochs (which the follower updates; the caller persists it).
func NewFollower(self, leader ReplicaID, leaderEpoch int32, logEndOffset, highWatermark int64, epochs *EpochCache) *Follower {
	f := &Follower{self: self, leader: leader, leaderEpoch: leaderEpoch, leo: logEndOffset,
		hwm: min(highWatermark, logEndOffset), epochs: epochs, phase: Truncating}
	epochs.TruncateFromEnd(logEndOffset) // epochs this replica led without appending
	if _, ok := epochs.Latest(); !ok && logEndOffset == 0 {
		f.phase = Fetching // an empty log has nothing to diverge
	}
	return f
}

// Phase says whether the next request is an EpochRequest or a fetch.
func (f *Follower) Phase() FollowerPhase { return f.phase }

// LogEndOffset, HighWatermark, Leader and LeaderEpoch describe the follower's state.
func (f *Follower) LogEndOffset() int64  { return f.leo }
func (f *Follower) HighWatermark() int64 { return f.hwm }
func (f *Follower) Leader() ReplicaID    { return f.leader }
func (f *Follower) LeaderEpoch() int32   { return f.leaderEpoch }

// EpochRequest is the question to send while Truncating: the latest epoch in this log.
func (f *Follower) EpochRequest() EpochRequest {
	return EpochRequest{CurrentLeaderEpoch: f.leaderEpoch, Epoch: f.epochs.LatestEpoch()}
}

// FetchRequest is the fetch to send while Fetching.
func (f *Follower) FetchRequest() FetchRequest {
	return FetchRequest{Replica: f.self, FetchOffset: f.leo, CurrentLeaderEpoch: f.leaderEpoch}
}

// TruncationOffset decides where a follower's log must end, given its epoch cache, its
// log end offset and high watermark, and the leader's answer to "where does epoch E end?"
// for the follower's latest epoch E (KIP-101 with KIP-279's fix):
//
//   - the leader knows no epoch up to E (UndefinedEpoch): fall back to the high watermark,
//     the only point known to be on the leader;
//   - otherwise the leader answered the largest epoch E' <= E it has, ending at offset O.
//     The follower's own records of E' end at O' (its end offset for E'); the logs agree up
//     to min(O, O'), and the follower truncates there (never above its own log end).
//
// Looking up E' locally is KIP-279's point: when the leader returns an epoch older than
// the one asked, truncating at O alone can keep records of an epoch the leader never had.
func TruncationOffset(local *EpochCache, logEndOffset, highWatermark int64, answer EpochEndOffset) int64 {
	if answer.Epoch == UndefinedEpoch || answer.EndOffset == UndefinedOffset {
		return min(highWatermark, logEndOffset)
	}
	own := local.EndOffsetFor(answer.Epoch, logEndOffset)
	end := min(answer.EndOffset, logEndOffset)
	if own.EndOffset != UndefinedOffset {
		end = min(end, own.EndOffset)
	}
	return end
}

// EpochAnswered takes the leader's answer to EpochRequest and returns the offset the log
// must be truncated to (equal to the log end offset when nothing goes). The follower's
// state already reflects the truncation: the driver must cut the log there (engine's
// truncate) before it sends the next fetch, and persist the epoch cache.
//
// When the leader's epoch E' is one this log does not have (its records at the offsets
// before the cut are of an older epoch the leader may not share), the logs are not yet known
// to agree below the cut: the follower stays Truncating and asks again with its new latest
// epoch, as Kafka's fetcher does (KIP-279). Each round removes at least the latest epoch, so
// the exchange ends.
func (f *Follower) EpochAnswered(answer EpochEndOffset) int64 {
	if f.phase != Truncating {
		return f.leo
	}
	asked := f.epochs.LatestEpoch()
	own := f.epochs.EndOffsetFor(answer.Epoch, f.leo)
	to := TruncationOffset(f.epochs, f.leo, f.hwm, answer)
	f.truncate(to)
	f.phase = Fetching
	defined := answer.Epoch != UndefinedEpoch && answer.EndOffset != UndefinedOffset
	if defined && own.Epoch != answer.Epoch && f.leo > 0 {
		if latest := f.epochs.LatestEpoch(); latest != UndefinedEpoch && latest < asked {
			f.phase = Truncating
		}
	}
	return to
}

func (f *Follower) truncate(to int64) {
	f.leo = min(f.leo, to)
	// Epochs starting at the new end hold no record here (they may never have held any: a
	// leader assigns its epoch at its log end when elected).
	f.epochs.TruncateFromEnd(f.leo)
	f.hwm = min(f.hwm, f.leo)
}

// Appended records that batches fetched from the leader were appended to the log, in
// order: the epoch cache learns each new epoch's start offset. A batch that does not start
// at the log end offset is ErrBatchOutOfOrder and nothing after it is applied.
func (f *Follower) Appended(batches []BatchEpoch) error {
	for _, b := range batches {
		if b.BaseOffset != f.leo || b.EndOffset <= b.BaseOffset {
			return fmt.Errorf("batch [%d,%d) at log end %d: %w", b.BaseOffset, b.EndOffset, f.leo, ErrBatchOutOfOrder)
		}
		if _, err := f.epochs.Assign(b.Epoch, b.BaseOffset); err != nil {
			return fmt.Errorf("batch [%d,%d) epoch %d: %w: %w", b.BaseOffset, b.EndOffset, b.Epoch, ErrBatchOutOfOrder, err)
		}
		f.leo = b.EndOffset
	}
	return nil
}

// Fetched takes the leader's fetch answer (after Appended for its records): the follower's
// high watermark becomes the leader's, capped at its own log end offset.
func (f *Follower) Fetched(resp FetchResponse) error {
	if resp.Err != nil {
		if errors.Is(resp.Err, ErrOffsetOutOfRange) {
			// The leader's log is shorter than ours (its log was cut after an unclean
			// election): find the divergence again.
			f.phase = Truncating
		}
		return resp.Err
	}
	f.hwm = max(f.hwm, min(resp.HighWatermark, f.leo))
	return nil
}
