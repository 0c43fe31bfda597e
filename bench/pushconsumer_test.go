package bench

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPushConsumer(t *testing.T) {
	c := NewPushConsumer("test", 2)
	c.Deliver(1, []byte("a"))
	c.Deliver(2, []byte("b"))
	var got []string
	if err := c.Poll(context.Background(), func(p int, d []byte) { got = append(got, string(d)) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("polled %v, want [a b]", got)
	}
	// A callback blocked on a full buffer is released by Stop.
	c.Deliver(1, []byte("c"))
	c.Deliver(1, []byte("d"))
	released := make(chan struct{})
	go func() { c.Deliver(1, []byte("e")); close(released) }()
	c.Stop()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("Deliver still blocked after Stop")
	}
	c.Stop() // idempotent
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	empty := NewPushConsumer("test", 1)
	if err := empty.Poll(ctx, func(int, []byte) {}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll on a cancelled context: %v", err)
	}
}
