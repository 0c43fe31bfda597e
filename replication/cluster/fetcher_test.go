package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
)

func buildBatch(t testing.TB, base int64, epoch int32, records int) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	for i := 0; i < records; i++ {
		b.Append(time.Unix(1_700_000_000, 0).UnixMilli(), nil, []byte("value"), nil)
	}
	out, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	batch.SetBaseOffset(out, base)
	batch.SetLeaderEpoch(out, epoch)
	return out
}

// splitReplicated keeps whole batches with their offsets and epochs and drops a trailing
// partial batch (a fetch cut by its byte limit).
func TestSplitReplicated(t *testing.T) {
	a, b := buildBatch(t, 10, 2, 3), buildBatch(t, 13, 3, 1)
	data := append(append(append([]byte(nil), a...), b...), b[:len(b)/2]...)
	batches, epochs := splitReplicated(data)
	if len(batches) != 2 || len(epochs) != 2 {
		t.Fatalf("%d batches, %d epochs, want 2 and 2", len(batches), len(epochs))
	}
	if e := epochs[0]; e.Epoch != 2 || e.BaseOffset != 10 || e.EndOffset != 13 {
		t.Fatalf("first batch %+v", e)
	}
	if e := epochs[1]; e.Epoch != 3 || e.BaseOffset != 13 || e.EndOffset != 14 {
		t.Fatalf("second batch %+v", e)
	}
	if _, e := splitReplicated(buildBatch(t, 0, -1, 1)); e[0].Epoch != 0 {
		t.Fatalf("a batch without an epoch (written before replication) counts as epoch 0, got %d", e[0].Epoch)
	}
}

// FuzzSplitReplicated: bytes from a leader never panic the splitter, and what it keeps is
// whole batches that cover the input's prefix in order.
func FuzzSplitReplicated(f *testing.F) {
	a, b := buildBatch(f, 0, 1, 2), buildBatch(f, 2, 1, 1)
	f.Add(append(append([]byte(nil), a...), b...))
	f.Add(a[:len(a)-1])
	f.Add([]byte{})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		batches, epochs := splitReplicated(data)
		if len(batches) != len(epochs) {
			t.Fatalf("%d batches, %d epochs", len(batches), len(epochs))
		}
		at := 0
		for i, bt := range batches {
			if len(bt) == 0 || at+len(bt) > len(data) || &data[at] != &bt[0] {
				t.Fatalf("batch %d is not the next %d bytes of the input", i, len(bt))
			}
			if epochs[i].EndOffset <= epochs[i].BaseOffset && epochs[i].EndOffset != epochs[i].BaseOffset+1 {
				// LastOffsetDelta is attacker-controlled: the follower's Appended rejects
				// inverted ranges; the splitter only reports them.
				_ = epochs[i]
			}
			at += len(bt)
		}
	})
}

// TestAllRefused: a lane pauses (failedRoundWait) only after a round whose every answer the
// leader refused; one partition answered, or an empty round, keeps it asking at once.
func TestAllRefused(t *testing.T) {
	refused := FetchAnswer{Err: errors.New("not leader")}
	for _, tc := range []struct {
		answers []FetchAnswer
		want    bool
	}{
		{nil, false},
		{[]FetchAnswer{refused}, true},
		{[]FetchAnswer{refused, refused}, true},
		{[]FetchAnswer{refused, {}}, false},
		{[]FetchAnswer{{}}, false},
	} {
		if got := allRefused(tc.answers); got != tc.want {
			t.Errorf("allRefused(%+v) = %v, want %v", tc.answers, got, tc.want)
		}
	}
}
