package group

import (
	"math"
	"testing"
	"time"
)

func TestComputeLag(t *testing.T) {
	tests := []struct {
		name string
		in   LagInput
		want Lag
	}{
		{"caught up", LagInput{Committed: 100, LogStart: 0, LogEnd: 100, CommittedTimestampMs: -1, NewestTimestampMs: 5000},
			Lag{Records: 0, TimeKnown: true}},
		{"behind", LagInput{Committed: 90, LogStart: 0, LogEnd: 100, CommittedTimestampMs: 1000, NewestTimestampMs: 61000},
			Lag{Records: 10, Time: time.Minute, TimeKnown: true}},
		{"behind, timestamps unknown", LagInput{Committed: 90, LogEnd: 100, CommittedTimestampMs: -1, NewestTimestampMs: -1},
			Lag{Records: 10}},
		{"out-of-order timestamps clamp at 0", LagInput{Committed: 90, LogEnd: 100, CommittedTimestampMs: 9000, NewestTimestampMs: 1000},
			Lag{Records: 10, TimeKnown: true}},
		{"no commit", LagInput{Committed: -1, LogEnd: 100}, Lag{Records: -1}},
		{"below log start", LagInput{Committed: 10, LogStart: 50, LogEnd: 100, CommittedTimestampMs: 2000, NewestTimestampMs: 4000},
			Lag{Records: 50, Time: 2 * time.Second, TimeKnown: true, BelowLogStart: true}},
		{"above log end", LagInput{Committed: 120, LogEnd: 100}, Lag{AboveLogEnd: true, TimeKnown: true}},
		// The seed's warehouse loader: committed 4.32e9, log end 4.752e9, a day behind.
		{"a day behind", LagInput{Committed: 4_320_000_000, LogEnd: 4_752_000_000, CommittedTimestampMs: 0, NewestTimestampMs: 86_400_000},
			Lag{Records: 432_000_000, Time: 24 * time.Hour, TimeKnown: true}},
	}
	for _, tt := range tests {
		if got := ComputeLag(tt.in); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestRetentionOvertake(t *testing.T) {
	now := time.UnixMilli(10 * 86_400_000)
	day := int64(86_400_000)
	tests := []struct {
		name string
		in   RetentionInput
		want Overtake
	}{
		// The seed: retention 7 days, the committed record is a day old → 6 days = 144 h.
		{"time, a day old of seven", RetentionInput{Now: now, CommittedTimestampMs: now.UnixMilli() - day, RetentionMs: 7 * day, RetentionBytes: -1},
			Overtake{Hours: 144}},
		// Retention 24 h and a day-old committed record: already being deleted.
		{"time, already due", RetentionInput{Now: now, CommittedTimestampMs: now.UnixMilli() - day - 1, RetentionMs: day, RetentionBytes: -1},
			Overtake{Hours: 0}},
		// 1 GiB retention, 0.5 GiB after the committed offset, 1 MiB/s in: 512 s.
		{"size first", RetentionInput{Now: now, CommittedTimestampMs: now.UnixMilli(), RetentionMs: 7 * day, RetentionBytes: 1 << 30,
			BytesFromCommitted: 1 << 29, ProduceBytesPerSecond: 1 << 20}, Overtake{Hours: 512.0 / 3600, BySize: true}},
		{"size already exceeded", RetentionInput{Now: now, RetentionMs: -1, RetentionBytes: 100, BytesFromCommitted: 100, ProduceBytesPerSecond: 1},
			Overtake{Hours: 0, BySize: true}},
		{"size only, nothing produced", RetentionInput{Now: now, RetentionMs: -1, RetentionBytes: 100, BytesFromCommitted: 10},
			Overtake{Never: true}},
		{"unlimited", RetentionInput{Now: now, RetentionMs: -1, RetentionBytes: -1, ProduceBytesPerSecond: 1e9}, Overtake{Never: true}},
	}
	for _, tt := range tests {
		got := RetentionOvertake(tt.in)
		if got.Never != tt.want.Never || got.BySize != tt.want.BySize || math.Abs(got.Hours-tt.want.Hours) > 1e-9 {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestCatchUp(t *testing.T) {
	// The seed: 86.4e9 records behind, 1M/s produced, 6M/s consumed → 17,280 s ≈ 4.8 h.
	d, ok := CatchUp(86_400_000_000, 1e6, 6e6)
	if !ok || d != 17_280*time.Second {
		t.Fatalf("seed catch-up: %v %v", d, ok)
	}
	if _, ok := CatchUp(10, 5, 5); ok {
		t.Fatal("equal rates never catch up")
	}
	if d, ok := CatchUp(0, 5, 1); !ok || d != 0 {
		t.Fatal("no lag is caught up")
	}
	if _, ok := CatchUp(math.MaxInt64, 0, 1e-9); ok {
		t.Fatal("an overflowing estimate must say never")
	}
}
