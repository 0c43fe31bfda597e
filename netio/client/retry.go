package client

import (
	"context"
	"errors"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
)

// Retrying calls that a leader change interrupts. A partition's leader moves when its
// broker dies or is fenced; until the client has fresh metadata its requests reach a broker
// that no longer leads (NOT_LEADER_OR_WRONG_SHARD, FENCED_LEADER_EPOCH,
// UNKNOWN_LEADER_EPOCH) or none at all (a lost connection). Such a call refreshes the
// topic's metadata, pauses, and goes again until the caller's deadline.

// leaderRetryTimeout bounds the retries of a call whose context has no deadline: longer
// than a failover (a broker session timeout, 6 s by default, plus a controller election).
const leaderRetryTimeout = 60 * time.Second

// LeadershipError reports whether err means that the request reached a broker that does
// not lead the partition (now), or none: refresh metadata and try again.
func LeadershipError(err error) bool {
	for _, code := range []wire.ErrorCode{wire.ErrNotLeaderOrWrongShard, wire.ErrFencedLeaderEpoch, wire.ErrUnknownLeaderEpoch, wire.ErrShuttingDown} {
		if errors.Is(err, code) {
			return true
		}
	}
	return errors.Is(err, ErrConnClosed)
}

// leadershipCode is LeadershipError for a per-partition error code.
func leadershipCode(code wire.ErrorCode) bool {
	switch code {
	case wire.ErrNotLeaderOrWrongShard, wire.ErrFencedLeaderEpoch, wire.ErrUnknownLeaderEpoch, wire.ErrShuttingDown:
		return true
	}
	return false
}

// BackoffDelay is the pause before retry attempt n (0 for the first retry): base doubled n
// times, capped at max, then scaled into [d/2, d) by r in [0, 1) ("equal jitter": never
// less than half, so retries neither hammer nor synchronise).
func BackoffDelay(base, max time.Duration, n int, r float64) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + time.Duration(r*float64(d/2))
}

// retryLeader runs attempt until it succeeds or fails with an error that is not a
// leadership error. Between attempts it marks topic's metadata stale (the next attempt
// refreshes it) and backs off. Without a deadline on ctx the retries stop after
// leaderRetryTimeout; the last error is returned.
func (c *Client) retryLeader(ctx context.Context, topic string, attempt func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderRetryTimeout)
		defer cancel()
	}
	for n := 0; ; n++ {
		err := attempt(ctx)
		if err == nil || !LeadershipError(err) || ctx.Err() != nil {
			return err
		}
		c.invalidate(topic)
		if c.sleep(ctx, c.backoff(n)) != nil {
			return err
		}
	}
}

// backoff is the client's pause before retry n.
func (c *Client) backoff(n int) time.Duration {
	return BackoffDelay(c.cfg.RetryBackoff, c.cfg.RetryBackoffMax, n, c.jitter())
}
