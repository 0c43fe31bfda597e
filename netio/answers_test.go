package netio

import (
	"slices"
	"testing"
	"time"
)

// TestPartitionAnswers: the last answer replies once; with a timeout, the timer replies with
// the partitions still waiting and later answers are dropped; a request of no partitions
// replies at once. The timer is injected: no clock runs.
func TestPartitionAnswers(t *testing.T) {
	var replies [][]bool
	record := func(waiting []bool) { replies = append(replies, waiting) }

	a := NewPartitionAnswers(2, record)
	set := 0
	a.Answer(1, func() { set++ })
	a.Answer(0, func() { set++ })
	if len(replies) != 1 || replies[0] != nil || set != 2 {
		t.Fatalf("all answered: replies %v, %d answers set", replies, set)
	}

	replies = nil
	var fire func()
	stopped := false
	a = NewPartitionAnswers(3, record)
	a.Timeout(time.Second, func(d time.Duration, f func()) func() bool {
		fire = f
		return func() bool { stopped = true; return true }
	})
	a.Answer(1, func() {})
	fire()
	a.Answer(0, func() { t.Error("an answer after the timeout was written into the response") })
	if len(replies) != 1 || !slices.Equal(replies[0], []bool{true, false, true}) || stopped {
		t.Fatalf("timed out: replies %v, stopped %v; want one reply waiting on 0 and 2", replies, stopped)
	}

	replies = nil
	a = NewPartitionAnswers(1, record)
	a.Timeout(time.Second, func(d time.Duration, f func()) func() bool {
		fire = f
		return func() bool { stopped = true; return true }
	})
	a.Answer(0, func() {})
	fire() // the timer lost the race: nothing more
	if len(replies) != 1 || replies[0] != nil || !stopped {
		t.Fatalf("answered before the timeout: replies %v, stopped %v", replies, stopped)
	}

	replies = nil
	NewPartitionAnswers(0, record)
	if len(replies) != 1 || replies[0] != nil {
		t.Fatalf("no partitions: replies %v", replies)
	}
}
