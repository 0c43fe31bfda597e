package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// A Reserve that finds the estimate stale while another goroutine refreshes it goes on with
// the estimate instead of waiting for that statfs: a shard loop blocked on the refresh mutex
// is a locked thread the runtime must park and wake again (docs/benchmarks.md, "Session 12:
// what parks the shard threads"). The next Reserve after the refresh ends refreshes as before.
func TestDiskSpaceReserveDoesNotWaitForARefresh(t *testing.T) {
	var nowNanos atomic.Int64
	nowNanos.Store(time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNanos.Load()) }
	d, err := NewDiskSpace(t.TempDir(), 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	checked := d.checkedAt.Load()
	nowNanos.Add(int64(2 * d.recheck)) // stale

	d.mu.Lock() // a refresh in progress elsewhere
	before := d.FreeBytes()
	done := make(chan error, 1)
	go func() { done <- d.Reserve(4096) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Reserve during a refresh: %v", err)
		}
	case <-time.After(10 * time.Second): // a bound on a failure, not a synchronisation
		d.mu.Unlock()
		t.Fatal("Reserve waited for the refresh in progress")
	}
	if got := d.FreeBytes(); got != before-4096 {
		t.Errorf("estimate after Reserve(4096) = %d, want %d (the estimate it had, less the reservation)", got, before-4096)
	}
	if d.checkedAt.Load() != checked {
		t.Errorf("Reserve refreshed while another refresh held the lock")
	}
	d.mu.Unlock()

	if err := d.Reserve(4096); err != nil {
		t.Fatal(err)
	}
	if got, want := d.checkedAt.Load(), nowNanos.Load(); got != want {
		t.Errorf("after the refresh ended, Reserve did not refresh the stale estimate: checked at %d, want %d", got, want)
	}
}
