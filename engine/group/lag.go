package group

import (
	"math"
	"time"
)

// LagInput describes one partition as seen by one group.
type LagInput struct {
	// Committed is the group's committed offset (the next record it will read); -1 when
	// the group has committed nothing for the partition.
	Committed int64
	// LogStart is the partition's log start offset (retention deleted everything below).
	LogStart int64
	// LogEnd is the offset a consumer can read up to: the high watermark.
	LogEnd int64
	// CommittedTimestampMs is the timestamp of the record at Committed (the first one the
	// group has not consumed); -1 when unknown.
	CommittedTimestampMs int64
	// NewestTimestampMs is the timestamp of the newest record (at LogEnd-1); -1 when unknown.
	NewestTimestampMs int64
}

// Lag is how far a group is behind on one partition.
type Lag struct {
	// Records is the number of records the group has yet to consume: LogEnd - Committed,
	// or LogEnd - LogStart when the committed offset fell below the log start. -1 when
	// the group has no committed offset.
	Records int64
	// Time is how far behind the tail the group is in time: the newest record's timestamp
	// minus that of the first unconsumed record. 0 when caught up. Valid when TimeKnown.
	Time      time.Duration
	TimeKnown bool
	// BelowLogStart: retention deleted records the group had not consumed; its next fetch
	// gets OFFSET_OUT_OF_RANGE and auto.offset.reset decides what it skips.
	BelowLogStart bool
	// AboveLogEnd: the committed offset is past the high watermark (committed by hand, or
	// the log was truncated after a leader change); lag counts as 0.
	AboveLogEnd bool
}

// ComputeLag returns the lag of one partition. Pure.
func ComputeLag(in LagInput) Lag {
	if in.Committed < 0 {
		return Lag{Records: -1}
	}
	var l Lag
	switch {
	case in.Committed < in.LogStart:
		l.BelowLogStart = true
		l.Records = max(0, in.LogEnd-in.LogStart)
	case in.Committed > in.LogEnd:
		l.AboveLogEnd = true
	default:
		l.Records = in.LogEnd - in.Committed
	}
	switch {
	case l.Records == 0:
		l.TimeKnown = true
	case in.CommittedTimestampMs >= 0 && in.NewestTimestampMs >= 0:
		l.Time = time.Duration(max(0, in.NewestTimestampMs-in.CommittedTimestampMs)) * time.Millisecond
		l.TimeKnown = true
	}
	return l
}

// RetentionInput describes what decides when retention deletes a group's committed offset.
type RetentionInput struct {
	Now time.Time
	// CommittedTimestampMs is the timestamp of the record at the committed offset.
	CommittedTimestampMs int64
	// RetentionMs and RetentionBytes are the topic's retention.ms and retention.bytes
	// (per partition); negative means unlimited.
	RetentionMs, RetentionBytes int64
	// BytesFromCommitted is the size of the log from the committed offset to its end.
	BytesFromCommitted int64
	// ProduceBytesPerSecond is the partition's recent produce rate.
	ProduceBytesPerSecond float64
}

// Overtake is the estimate of when retention deletes the record at the committed offset
// if the group stops consuming now.
type Overtake struct {
	// Hours until then; 0 when it is already gone or due. Meaningless when Never.
	Hours float64
	// Never: unlimited retention, or only a size limit and nothing being produced.
	Never bool
	// BySize: retention.bytes comes first (otherwise retention.ms does).
	BySize bool
}

// RetentionOvertake estimates, for one partition, the hours until retention deletes the
// group's committed offset if the group consumes nothing more:
//
//   - by time: the record is deleted once its timestamp is retention.ms old:
//     CommittedTimestamp + retention.ms - now;
//   - by size: the record is deleted once more than retention.bytes of log follow it; the
//     log after it grows at the produce rate:
//     (retention.bytes - BytesFromCommitted) / produce rate;
//
// whichever comes first. Retention deletes whole segments, never the active one, and a
// segment only once its newest record is too old (or the log is a whole segment over the
// size), so the real deletion comes at or after the estimate: it is a lower bound, which
// is the safe side for an alert. Pure.
func RetentionOvertake(in RetentionInput) Overtake {
	hours := math.Inf(1)
	bySize := false
	if in.RetentionMs >= 0 {
		expiresMs := in.CommittedTimestampMs + in.RetentionMs
		hours = float64(expiresMs-in.Now.UnixMilli()) / float64(time.Hour/time.Millisecond)
	}
	if in.RetentionBytes >= 0 {
		var sizeHours float64
		switch {
		case in.BytesFromCommitted >= in.RetentionBytes:
			sizeHours = 0
		case in.ProduceBytesPerSecond <= 0:
			sizeHours = math.Inf(1)
		default:
			sizeHours = float64(in.RetentionBytes-in.BytesFromCommitted) / in.ProduceBytesPerSecond / 3600
		}
		if sizeHours < hours {
			hours, bySize = sizeHours, true
		}
	}
	if math.IsInf(hours, 1) {
		return Overtake{Never: true}
	}
	return Overtake{Hours: max(0, hours), BySize: bySize}
}

// CatchUp estimates how long a group needs to consume a backlog of lagRecords while
// producers keep adding produceRate records per second and it consumes consumeRate: lag /
// (consume - produce). ok is false when it never catches up at these rates.
func CatchUp(lagRecords int64, produceRate, consumeRate float64) (d time.Duration, ok bool) {
	if lagRecords <= 0 {
		return 0, true
	}
	surplus := consumeRate - produceRate
	if surplus <= 0 {
		return 0, false
	}
	seconds := float64(lagRecords) / surplus
	if seconds > float64(math.MaxInt64/int64(time.Second)) {
		return 0, false
	}
	return time.Duration(seconds * float64(time.Second)), true
}
