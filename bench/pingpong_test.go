package bench

import (
	"bytes"
	"context"
	"testing"

	"github.com/ringlog/ringlog/ring"
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

// TestUringEchoServesEveryVariant runs a ping-pong against the io_uring echo in each of its
// settings (in this process; `ringlog bench` runs it in another) and checks it answers
// every round trip and ends cleanly when the client closes.
func TestUringEchoServesEveryVariant(t *testing.T) {
	probe, err := ring.Open(ring.Config{Backend: "uring"})
	if err != nil {
		t.Skipf("io_uring unavailable: %v", err)
	}
	probe.Close()
	for _, spec := range []string{"uring", "uring:defer+timer", "uring:coop+pollfirst+append", "uring:single+multishot+sendop", "uring:cpu0"} {
		t.Run(spec, func(t *testing.T) {
			cfg, err := ParseUringEcho(spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, size := range []int{1, 1024, 300 << 10} { // 300 KiB: more than one recv and send
				addrc, served := make(chan string, 1), make(chan error, 1)
				go func() { served <- ServeUringEcho(size, cfg, func(addr string) { addrc <- addr }) }()
				var p *PingPong
				select {
				case addr := <-addrc:
					if p, err = DialPingPong(addr, size); err != nil {
						t.Fatal(err)
					}
				case err := <-served:
					t.Fatalf("echo ended before listening: %v", err)
				}
				for i := range p.out {
					p.out[i] = byte(i * 7)
				}
				lat := NewLatency()
				if err := p.Run(context.Background(), 50, lat); err != nil {
					t.Fatalf("size %d: %v", size, err)
				}
				if !bytes.Equal(p.in, p.out) {
					t.Fatalf("size %d: the echo changed the bytes", size)
				}
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				if err := <-served; err != nil {
					t.Fatalf("size %d: echo: %v", size, err)
				}
				if lat.Count() != 50 {
					t.Fatalf("size %d: %d round trips recorded", size, lat.Count())
				}
			}
		})
	}
}

func TestParseUringEchoRejects(t *testing.T) {
	for _, spec := range []string{"", "go", "uring:", "uring:fast", "uring:cpu", "uring:cpu-1", "uring:defer+coop", "uring:multishot+pollfirst"} {
		if _, err := ParseUringEcho(spec); err == nil {
			t.Errorf("%q accepted", spec)
		}
	}
	got, err := ParseUringEcho("uring:defer+cpu1+timer")
	if err != nil || got != (UringEcho{DeferTaskrun: true, Timer: true, CPU: 1}) {
		t.Fatalf("got %+v, %v", got, err)
	}
}
