package isr_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ringlog/ringlog/replication/isr"
)

func TestEpochCacheEndOffsetFor(t *testing.T) {
	c, err := isr.NewEpochCache([]isr.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 3, StartOffset: 10}, {Epoch: 4, StartOffset: 25}})
	if err != nil {
		t.Fatal(err)
	}
	const leo = 40
	tests := []struct {
		requested int32
		want      isr.EpochEndOffset
	}{
		{isr.UndefinedEpoch, isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}},
		{0, isr.EpochEndOffset{Epoch: 0, EndOffset: 0}},   // older than every entry
		{1, isr.EpochEndOffset{Epoch: 1, EndOffset: 10}},  // ends where epoch 3 starts
		{2, isr.EpochEndOffset{Epoch: 1, EndOffset: 10}},  // unknown: the largest below it
		{3, isr.EpochEndOffset{Epoch: 3, EndOffset: 25}},  // ends where 4 starts
		{4, isr.EpochEndOffset{Epoch: 4, EndOffset: leo}}, // the latest: the log end
		{5, isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}},
	}
	for _, tt := range tests {
		if got := c.EndOffsetFor(tt.requested, leo); got != tt.want {
			t.Errorf("EndOffsetFor(%d) = %v, want %v", tt.requested, got, tt.want)
		}
	}
}

func TestEpochCacheAssign(t *testing.T) {
	c, _ := isr.NewEpochCache(nil)
	steps := []struct {
		epoch   int32
		start   int64
		changed bool
		err     error
		want    []isr.EpochEntry
	}{
		{0, 0, true, nil, []isr.EpochEntry{{0, 0}}},
		{0, 5, false, nil, []isr.EpochEntry{{0, 0}}}, // the same epoch again
		{2, 5, true, nil, []isr.EpochEntry{{0, 0}, {2, 5}}},
		{1, 9, false, isr.ErrEpochRegression, []isr.EpochEntry{{0, 0}, {2, 5}}},
		{3, 5, true, nil, []isr.EpochEntry{{0, 0}, {3, 5}}}, // epoch 2 appended nothing
		{4, 3, true, nil, []isr.EpochEntry{{0, 0}, {4, 3}}}, // overlapping entries go
	}
	for i, s := range steps {
		changed, err := c.Assign(s.epoch, s.start)
		if changed != s.changed || !errors.Is(err, s.err) || !slices.Equal(c.Entries(), s.want) {
			t.Fatalf("step %d Assign(%d, %d) = %v, %v; entries %v; want %v, %v, %v",
				i, s.epoch, s.start, changed, err, c.Entries(), s.changed, s.err, s.want)
		}
	}
}

func TestNewEpochCacheRejectsDisorder(t *testing.T) {
	for _, entries := range [][]isr.EpochEntry{
		{{1, 5}, {1, 6}},
		{{1, 5}, {2, 5}},
		{{2, 5}, {1, 6}},
		{{-1, 0}},
		{{0, -3}},
	} {
		if _, err := isr.NewEpochCache(entries); !errors.Is(err, isr.ErrEpochRegression) {
			t.Errorf("NewEpochCache(%v) = %v, want ErrEpochRegression", entries, err)
		}
	}
}

// TestEpochCacheAgainstRecords checks the cache against a deliberately simple reference: the
// epoch of every record of the log, kept in a slice. Random appends (each new epoch with at
// least one record, as a follower learns epochs from batches), truncations from the end
// (a follower's divergence) and from the start (retention).
func TestEpochCacheAgainstRecords(t *testing.T) {
	seed := randomSeed(t)
	for round := range 200 {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		c, _ := isr.NewEpochCache(nil)
		var start int64
		var epochs []int32 // epochs[i] is the epoch of offset start+i
		epoch := int32(rng.IntN(3))
		for step := range 60 {
			leo := start + int64(len(epochs))
			switch op := rng.IntN(10); {
			case op < 6: // append a batch, maybe of a new epoch
				if rng.IntN(3) == 0 {
					epoch += 1 + int32(rng.IntN(3))
				}
				n := 1 + rng.IntN(4)
				if _, err := c.Assign(epoch, leo); err != nil {
					t.Fatalf("seed %d round %d step %d: %v", seed, round, step, err)
				}
				for range n {
					epochs = append(epochs, epoch)
				}
			case op < 8 && len(epochs) > 0: // truncate from the end
				to := start + int64(rng.IntN(len(epochs)+1))
				c.TruncateFromEnd(to)
				epochs = epochs[:to-start]
				if len(epochs) > 0 {
					epoch = max(epoch, epochs[len(epochs)-1]) // a new leader's epoch is never older
				}
			case len(epochs) > 1: // retention
				cut := int64(rng.IntN(len(epochs)))
				c.TruncateFromStart(start + cut)
				start += cut
				epochs = epochs[cut:]
			}
			checkAgainstRecords(t, seed, round, step, c, start, epochs)
		}
	}
}

func checkAgainstRecords(t *testing.T, seed uint64, round, step int, c *isr.EpochCache, start int64, epochs []int32) {
	t.Helper()
	if len(epochs) == 0 {
		return
	}
	leo := start + int64(len(epochs))
	for i, e := range epochs {
		if got := c.EpochAt(start + int64(i)); got != e {
			t.Fatalf("seed %d round %d step %d: EpochAt(%d) = %d, want %d (entries %v)", seed, round, step, start+int64(i), got, e, c.Entries())
		}
	}
	latest := epochs[len(epochs)-1]
	for requested := int32(-1); requested <= latest+2; requested++ {
		var want isr.EpochEndOffset
		switch {
		case requested == isr.UndefinedEpoch || requested > latest:
			want = isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}
		case requested == latest:
			want = isr.EpochEndOffset{Epoch: latest, EndOffset: leo}
		case requested < epochs[0]:
			want = isr.EpochEndOffset{Epoch: requested, EndOffset: start}
		default:
			want = isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: leo}
			for i, e := range epochs {
				if e <= requested {
					want.Epoch = e
				}
				if e > requested {
					want.EndOffset = start + int64(i)
					break
				}
			}
		}
		if got := c.EndOffsetFor(requested, leo); got != want {
			t.Fatalf("seed %d round %d step %d: EndOffsetFor(%d) = %v, want %v (entries %v, start %d, epochs %v)",
				seed, round, step, requested, got, want, c.Entries(), start, epochs)
		}
	}
}

func TestTruncationOffset(t *testing.T) {
	// The follower's log: epoch 0 [0,5), epoch 2 [5,9), epoch 3 [9,12).
	local, _ := isr.NewEpochCache([]isr.EpochEntry{{0, 0}, {2, 5}, {3, 9}})
	const leo, hwm = 12, 6
	tests := []struct {
		name   string
		answer isr.EpochEndOffset
		want   int64
	}{
		{"leader knows nothing: the high watermark", isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}, hwm},
		{"same epoch, leader shorter", isr.EpochEndOffset{Epoch: 3, EndOffset: 10}, 10},
		{"same epoch, leader longer", isr.EpochEndOffset{Epoch: 3, EndOffset: 20}, leo},
		{"leader never had epoch 3, its epoch 2 ends at 7", isr.EpochEndOffset{Epoch: 2, EndOffset: 7}, 7},
		// KIP-279: the leader's largest epoch <= 3 is 1, which the follower never had; its
		// epoch-1 answer ends at 8, but locally epoch 1 ends where epoch 2 starts (5).
		{"leader's older epoch ends beyond ours (KIP-279)", isr.EpochEndOffset{Epoch: 1, EndOffset: 8}, 5},
		{"leader's epoch 2 ends beyond ours", isr.EpochEndOffset{Epoch: 2, EndOffset: 11}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isr.TruncationOffset(local, leo, hwm, tt.answer); got != tt.want {
				t.Errorf("TruncationOffset(%v) = %d, want %d", tt.answer, got, tt.want)
			}
		})
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leader-epoch-checkpoint")
	entries, err := isr.ReadCheckpoint(path)
	if err != nil || len(entries) != 0 {
		t.Fatalf("missing file: %v, %v; want empty", entries, err)
	}
	for _, want := range [][]isr.EpochEntry{
		{},
		{{0, 0}},
		{{0, 0}, {2, 1500}, {5, 9001}, {2147483647, 9223372036854775807}},
	} {
		if err := isr.WriteCheckpoint(path, want); err != nil {
			t.Fatal(err)
		}
		got, err := isr.ReadCheckpoint(path)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("read back %v, %v; want %v", got, err, want)
		}
	}
	data, _ := os.ReadFile(path)
	if want := "0\n4\n0 0\n2 1500\n5 9001\n2147483647 9223372036854775807\n"; string(data) != want {
		t.Errorf("file %q, want %q", data, want)
	}
	// No temporary file is left behind.
	names, _ := os.ReadDir(filepath.Dir(path))
	if len(names) != 1 {
		t.Errorf("directory holds %v, want only the checkpoint", names)
	}
	if err := isr.WriteCheckpoint(path, []isr.EpochEntry{{3, 5}, {2, 6}}); !errors.Is(err, isr.ErrEpochRegression) {
		t.Errorf("writing disordered entries: %v", err)
	}
}

func TestDecodeCheckpointRejects(t *testing.T) {
	for _, text := range []string{
		"",
		"0\n",
		"0\n1\n",                         // count says 1, no entry
		"0\n0\n1 1\n",                    // count says 0, one entry
		"1\n0\n",                         // unknown version
		"0\n1\n1 5",                      // no final newline
		"0\n1\n1  5\n",                   // two spaces
		"0\n1\n-1 5\n",                   // negative epoch
		"0\n1\n01 5\n",                   // leading zero
		"0\n1\n+1 5\n",                   // sign
		"0\n1\n2147483648 5\n",           // epoch over int32
		"0\n2\n1 5\n1 6\n",               // epoch not increasing
		"0\n2\n1 5\n2 5\n",               // offset not increasing
		"0\n1\n1 5 7\n",                  // three fields
		"0\n1048577\n",                   // count over the limit
		"0\r\n1\r\n1 5\r\n",              // CRLF
		"0\n1\n1 99999999999999999999\n", // offset over int64
	} {
		if _, err := isr.DecodeCheckpoint([]byte(text)); !errors.Is(err, isr.ErrCorruptCheckpoint) {
			t.Errorf("DecodeCheckpoint(%q) = %v, want ErrCorruptCheckpoint", text, err)
		}
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add([]byte("0\n0\n"))
	f.Add([]byte("0\n3\n0 0\n2 1500\n5 9001\n"))
	f.Add([]byte("0\n1048577\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := isr.DecodeCheckpoint(data)
		if err != nil {
			if !errors.Is(err, isr.ErrCorruptCheckpoint) {
				t.Fatalf("error %v is not ErrCorruptCheckpoint", err)
			}
			return
		}
		// What decodes re-encodes to the same bytes (the format is canonical).
		if got := isr.EncodeCheckpoint(entries); string(got) != string(data) {
			t.Fatalf("re-encoded %q, decoded from %q", got, data)
		}
	})
}
