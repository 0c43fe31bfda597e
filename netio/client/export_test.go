package client

import (
	"context"
	"time"
)

// Murmur2ForTest exposes murmur2 to the external test package.
var Murmur2ForTest = murmur2

// SetConsumerClock replaces a consumer's clock, sleep and jitter (tests of the back-off).
func SetConsumerClock(co *Consumer, now func() time.Time, sleep func(context.Context, time.Duration), jitter func(int64) int64) {
	co.now, co.sleep, co.jitter = now, sleep, jitter
}

// SetClientRetryClock replaces a client's pause between leadership retries and its jitter
// source (tests of the retry path record the pauses instead of sleeping).
func SetClientRetryClock(c *Client, sleep func(context.Context, time.Duration) error, jitter func() float64) {
	c.sleep, c.jitter = sleep, jitter
}

// FetchesInFlight is the number of shard addresses a consumer has a fetch in flight to.
func FetchesInFlight(co *Consumer) int { return len(co.inflight) }

// LeaderAddrForTest is the shard address the client routes a partition to.
func LeaderAddrForTest(c *Client, topic string, partition int32) string {
	return c.leaderAddr(topic, partition)
}
