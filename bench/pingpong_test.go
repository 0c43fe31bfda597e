package bench

import (
	"context"
	"testing"
)

func TestPingPongRecordsEveryRoundTrip(t *testing.T) {
	p, err := NewPingPong(1024)
	if err != nil {
		t.Fatal(err)
	}
	lat := NewLatency()
	if err := p.Run(context.Background(), 200, lat); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background(), 100, lat); err != nil { // the connection stays usable
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if lat.Count() != 300 || lat.Quantile(50) <= 0 {
		t.Fatalf("count %d, p50 %v", lat.Count(), lat.Quantile(50))
	}
}

func TestPingPongRejectsSizes(t *testing.T) {
	for _, size := range []int{0, -1, PingPongSizeMax + 1} {
		if _, err := NewPingPong(size); err == nil {
			t.Fatalf("size %d accepted", size)
		}
	}
}

// BenchmarkPingPong1KiB is one loopback round trip of 1 KiB each way.
func BenchmarkPingPong1KiB(b *testing.B) {
	p, err := NewPingPong(1024)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	lat := NewLatency()
	b.ReportAllocs()
	b.SetBytes(2 * 1024)
	b.ResetTimer()
	if err := p.Run(context.Background(), b.N, lat); err != nil {
		b.Fatal(err)
	}
}
