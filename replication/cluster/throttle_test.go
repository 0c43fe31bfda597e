package cluster

import (
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/controller"
	"golang.org/x/sys/unix"
)

// The throttle lets a catching-up replica fetch while its budget lasts and keeps the bytes
// copied within rate × elapsed plus two responses (the first, and one of saved credit),
// with an injected clock; fetch round trips shorter than a chunk's time cost no rate.
func TestThrottle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	th := newThrottle(1<<20, func() time.Time { return now })
	if w := th.wait(); w != 0 {
		t.Fatalf("a fresh throttle waits %v", w)
	}
	if got := th.chunkBytes(); got != 1<<20/10 {
		t.Fatalf("chunk %d, want a tenth of the rate", got)
	}
	// A replica that fetches whenever it may, one chunk at a time, for 10 s of clock.
	start, copied := now, int64(0)
	for now.Sub(start) < 10*time.Second {
		if w := th.wait(); w > 0 {
			now = now.Add(w)
			continue
		}
		n := int64(th.chunkBytes())
		copied += n
		th.charge(n)
		now = now.Add(7 * time.Millisecond) // the round trip
	}
	elapsed := now.Sub(start).Seconds()
	chunk := float64(th.chunkBytes())
	if budget := elapsed * (1 << 20); float64(copied) > budget+2*chunk || float64(copied) < budget-chunk {
		t.Fatalf("copied %d bytes in %.2fs, want the rate's %.0f within -1/+2 chunks of %.0f", copied, elapsed, budget, chunk)
	}
	// Idle time saves one chunk of credit, not the pause's.
	now = now.Add(time.Minute)
	th.charge(int64(th.chunkBytes()))
	if w := th.wait(); w != 0 {
		t.Fatalf("after an idle minute and one chunk the throttle waits %v, want 0", w)
	}
	th.charge(int64(th.chunkBytes()))
	if w := th.wait(); w < 99*time.Millisecond || w > 101*time.Millisecond {
		t.Fatalf("after an idle minute and two chunks the throttle waits %v, want 100ms", w)
	}
	if big := newThrottle(1<<40, time.Now); big.chunkBytes() != fetchBytesMax {
		t.Fatalf("chunk %d above the fetch size", big.chunkBytes())
	}
	if small := newThrottle(1, time.Now); small.chunkBytes() != 64<<10 {
		t.Fatalf("chunk %d below 64 KiB", small.chunkBytes())
	}
}

// Throttle lists: a topic without the key throttles every replica, an empty value none, a
// list the replicas it names for each broker, per side.
func TestThrottleLists(t *testing.T) {
	md := &controller.Metadata{Version: 7, Topics: map[string]*controller.Topic{
		"unset": {Name: "unset"},
		"listed": {Name: "listed", Config: map[string]string{
			engine.ConfigLeaderThrottledReplicas: "0:1,1:2", engine.ConfigFollowerThrottledReplicas: "*"}},
		"none": {Name: "none", Config: map[string]string{engine.ConfigFollowerThrottledReplicas: ""}},
	}}
	l := newThrottleLists(md)
	for _, c := range []struct {
		topic     string
		partition int32
		leader    bool
		broker    int32
		want      bool
	}{
		{"unset", 0, true, 1, true},
		{"unset", 3, false, 2, true},
		{"listed", 0, true, 1, true},
		{"listed", 0, true, 2, false},
		{"listed", 1, true, 2, true},
		{"listed", 2, true, 1, false},
		{"listed", 2, false, 9, true},
		{"none", 0, false, 1, false},
		{"none", 0, true, 1, true}, // the leader key is unset
		{"unknown", 0, true, 1, true},
	} {
		tp := shard.TopicPartition{Topic: c.topic, Partition: c.partition}
		if got := l.listed(c.leader, tp, c.broker); got != c.want {
			t.Errorf("listed(leader %v, %s/%d, broker %d) = %v, want %v", c.leader, c.topic, c.partition, c.broker, got, c.want)
		}
	}
	var none *throttleLists
	if !none.listed(true, shard.TopicPartition{Topic: "x"}, 1) {
		t.Error("before any metadata every replica should count as listed")
	}
}

// lowerPriority lowers the priority of its own thread only.
func TestLowerPriority(t *testing.T) {
	before, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Skip("getpriority:", err)
	}
	done := make(chan int)
	go func() {
		lowerPriority()
		p, _ := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
		done <- p
	}()
	got := <-done
	if want := max(before-catchUpNice, 1); got != want {
		t.Errorf("thread priority after lowerPriority %d (20 - nice), want %d (from %d)", got, want, before)
	}
	if now, _ := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid()); now != before {
		t.Errorf("the test's own thread changed priority: %d, was %d", now, before)
	}
}
