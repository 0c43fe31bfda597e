package shard

import (
	"errors"
	"slices"
	"testing"

	"github.com/ringlog/ringlog/engine"
)

// SetLogDefaults changes the defaults in force for every topic that does not set the key
// itself, reopens only the topics whose configuration changed, keeps them writable, and
// refuses invalid defaults without changing anything.
func TestSetLogDefaults(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 2)
	defer b.Close()
	if err := b.CreateTopic("plain", 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("own", 1, map[string]string{"retention.ms": "1000"}); err != nil {
		t.Fatal(err)
	}
	if b.BrokerSetsConfig("retention.ms") {
		t.Error("retention.ms reported as set by the broker before any default was set")
	}
	names, err := b.SetLogDefaults(engine.LogConfig{RetentionMs: 3600000})
	if err != nil || !slices.Equal(names, []string{"plain"}) {
		t.Fatalf("SetLogDefaults(retention.ms): reconfigured %v, %v; want [plain]", names, err)
	}
	if got := b.EffectiveConfig(b.Topic("plain"))["retention.ms"]; got != "3600000" {
		t.Errorf("plain: retention.ms %s, want the new default 3600000", got)
	}
	if got := b.EffectiveConfig(b.Topic("own"))["retention.ms"]; got != "1000" {
		t.Errorf("own: retention.ms %s, want its own 1000", got)
	}
	if !b.BrokerSetsConfig("retention.ms") || b.BrokerSetsConfig("segment.bytes") {
		t.Errorf("BrokerSetsConfig: retention.ms %v (want true), segment.bytes %v (want false)",
			b.BrokerSetsConfig("retention.ms"), b.BrokerSetsConfig("segment.bytes"))
	}
	for _, tp := range []TopicPartition{{"plain", 0}, {"plain", 1}, {"own", 0}} {
		if r := produce(t, b, tp, AcksLeader, buildBatch(t, "after", 3)); r.Err != nil {
			t.Fatalf("produce to %v after the change: %v", tp, r.Err)
		}
	}
	// Same defaults again: nothing to reopen.
	if names, err := b.SetLogDefaults(engine.LogConfig{RetentionMs: 3600000}); err != nil || len(names) != 0 {
		t.Errorf("unchanged defaults reopened %v (%v)", names, err)
	}
	// flush.always concerns both topics.
	names, err = b.SetLogDefaults(engine.LogConfig{RetentionMs: 3600000, FlushAlways: true})
	names = slices.DeleteFunc(names, internalTopic) // __consumer_offsets takes the broker's flush policy too
	if err != nil || !slices.Equal(names, []string{"own", "plain"}) {
		t.Errorf("flush.always: reconfigured %v, %v; want [own plain]", names, err)
	}
	// Invalid defaults change nothing.
	if _, err := b.SetLogDefaults(engine.LogConfig{SegmentBytes: 10}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("segment.bytes=10: %v, want ErrInvalidConfig", err)
	}
	if got := b.EffectiveConfig(b.Topic("plain"))["flush.always"]; got != "true" {
		t.Errorf("after a refused change: flush.always %s, want true", got)
	}
	// New topics get the defaults in force.
	if err := b.CreateTopic("later", 1, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.EffectiveConfig(b.Topic("later"))["retention.ms"]; got != "3600000" {
		t.Errorf("later: retention.ms %s, want 3600000", got)
	}
}
