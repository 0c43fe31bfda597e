package shard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// fillPartition creates topic with one partition and produces n batches of m records.
func fillPartition(t *testing.T, b *Broker, topic string, n, m int) (tp TopicPartition, batchBytes int) {
	t.Helper()
	if err := b.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	tp = TopicPartition{Topic: topic}
	for i := 0; i < n; i++ {
		bt := buildBatch(t, "v", m)
		batchBytes = len(bt)
		if r := produce(t, b, tp, AcksLeader, bt); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return tp, batchBytes
}

func totalSize(results []FetchResult) (size int64) {
	for i := range results {
		size += results[i].Records.Size
	}
	return size
}

func releaseAll(results []FetchResult) {
	for i := range results {
		results[i].Release()
	}
}

// ResponseBytesMax is Kafka's fetch max_bytes: whole batches up to the limit across all
// partitions, and the first batch even when it alone is larger.
func TestFetchResponseBytesMax(t *testing.T) {
	// One shard: its partitions are read in request order, so which one gets the first-batch
	// allowance is fixed. (Shards read concurrently: "first" is whichever charges first.)
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	tpA, batchBytes := fillPartition(t, b, "a", 10, 20)
	tpB, _ := fillPartition(t, b, "b", 10, 20)
	for _, tc := range []struct {
		name              string
		responseMax       int64
		partitionMax      int32
		wantMin, wantMax  int64
		wantNonEmptyParts int
	}{
		{"no bound", 0, 1 << 20, int64(20 * batchBytes), int64(20 * batchBytes), 2},
		{"bound across partitions", int64(13 * batchBytes), 1 << 20, int64(11 * batchBytes), int64(13 * batchBytes), 2},
		{"first batch larger than the bound", 10, 1 << 20, int64(batchBytes), int64(batchBytes), 1},
		{"first batch larger than the partition limit", 1 << 20, 10, int64(batchBytes), int64(batchBytes), 1},
		{"bound of exactly one batch", int64(batchBytes), 1 << 20, int64(batchBytes), int64(batchBytes), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := fetch(t, b, FetchRequest{ResponseBytesMax: tc.responseMax, Partitions: []FetchPartition{
				{TopicPartition: tpA, MaxBytes: tc.partitionMax}, {TopicPartition: tpB, MaxBytes: tc.partitionMax},
			}})
			defer releaseAll(results)
			nonEmpty := 0
			for i := range results {
				if results[i].Err != nil {
					t.Fatal(results[i].Err)
				}
				if results[i].Records.Size > 0 {
					nonEmpty++
				}
			}
			if size := totalSize(results); size < tc.wantMin || size > tc.wantMax {
				t.Errorf("response records %d bytes, want [%d, %d] (batch %d bytes)", size, tc.wantMin, tc.wantMax, batchBytes)
			}
			if nonEmpty != tc.wantNonEmptyParts {
				t.Errorf("%d partitions with records, want %d", nonEmpty, tc.wantNonEmptyParts)
			}
		})
	}
}

// Across shards the bound holds whatever order the reads finish in.
func TestFetchResponseBytesMaxAcrossShards(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 4)
	defer b.Close()
	var parts []FetchPartition
	batchBytes := 0
	for i := 0; i < 8; i++ {
		tp, n := fillPartition(t, b, fmt.Sprintf("s%d", i), 6, 20)
		batchBytes = n
		parts = append(parts, FetchPartition{TopicPartition: tp, MaxBytes: 1 << 20})
	}
	bound := int64(10 * batchBytes)
	for range 20 {
		results := fetch(t, b, FetchRequest{ResponseBytesMax: bound, Partitions: parts})
		if size := totalSize(results); size > bound || size == 0 {
			t.Fatalf("response records %d bytes, bound %d", size, bound)
		}
		releaseAll(results)
	}
}

// A failing descriptor dup (EMFILE) must close only the duplicates already made, never the
// segment's own descriptor (issue 10 #4: produce then failed with "pwritev fd -1").
func TestFetchDupFailureKeepsSegmentOpen(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	tp, _ := fillPartition(t, b, "d", 3, 5)
	realDup := dupFile
	defer func() { dupFile = realDup }()
	dupFile = func(uintptr) (int, error) { return -1, unix.EMFILE }
	results := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition: tp, MaxBytes: 1 << 20}}})
	if !errors.Is(results[0].Err, ErrThrottled) || !errors.Is(results[0].Err, unix.EMFILE) {
		t.Fatalf("fetch with a failing dup: %v, want ErrThrottled wrapping EMFILE", results[0].Err)
	}
	releaseAll(results)
	if held, _ := b.FilesHeld(); held != 0 {
		t.Errorf("%d descriptors still charged after the failed fetch", held)
	}
	dupFile = realDup
	if r := produce(t, b, tp, AcksAll, buildBatch(t, "after", 2)); r.Err != nil {
		t.Fatalf("produce after a failed dup: %v", r.Err)
	}
	results = fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition: tp, Offset: 15, MaxBytes: 1 << 20}}})
	if got := values(t, &results[0]); len(got) != 2 || got[0] != "15:after-0" {
		t.Fatalf("read after a failed dup: %v", got)
	}
}

// Descriptors held by unsent results are charged to the request's quota and the broker's,
// refused with ErrThrottled beyond either, and given back by Release.
func TestFetchFileQuotas(t *testing.T) {
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 1, FetchFilesMax: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tp, _ := fillPartition(t, b, "q", 2, 5)
	one := FetchRequest{Partitions: []FetchPartition{{TopicPartition: tp, MaxBytes: 1 << 20}}}
	conn := NewQuota(2)
	withConn := one
	withConn.Files = conn
	var held [][]FetchResult
	for i := 0; i < 2; i++ {
		r := fetch(t, b, withConn)
		if r[0].Err != nil {
			t.Fatalf("fetch %d within the quotas: %v", i, r[0].Err)
		}
		held = append(held, r)
	}
	if r := fetch(t, b, withConn); !errors.Is(r[0].Err, ErrThrottled) || r[0].Records.Size != 0 {
		t.Fatalf("fetch over the connection quota: %v (%d bytes)", r[0].Err, r[0].Records.Size)
	}
	held = append(held, fetch(t, b, one)) // the broker's third and last
	if r := fetch(t, b, one); !errors.Is(r[0].Err, ErrThrottled) {
		t.Fatalf("fetch over the broker quota: %v", r[0].Err)
	}
	for _, r := range held {
		releaseAll(r)
	}
	if n, _ := b.FilesHeld(); n != 0 || conn.Held() != 0 {
		t.Fatalf("after Release: broker holds %d, connection %d", n, conn.Held())
	}
	r := fetch(t, b, withConn)
	if r[0].Err != nil || r[0].Records.Size == 0 {
		t.Fatalf("fetch after release: %v", r[0].Err)
	}
	releaseAll(r)
}

// readModel is ReadBounded's size rule over a partition's batch sizes: whole batches up to
// limit, but at least the first.
func readModel(batches []int64, limit int64) (size int64) {
	for i, n := range batches {
		if i > 0 && size+n > limit {
			break
		}
		size += n
	}
	return size
}

// The limits under every interleaving of concurrent reads (each partition: take a limit,
// read, charge; retry when told): the whole answer stays within the bound (plus the first
// batch once), retries are bounded, and when every partition's read fits in the bound
// together, each partition with data gets all of it, whatever the others' limits. The old
// reserve-before-read left partitions read alongside one with MaxBytes >= the bound empty.
func TestFetchLimitsConcurrentCharges(t *testing.T) {
	// The reported case, step by step: both take their limit before either charges.
	l := &fetchLimits{bytesMax: 1000}
	l.reset()
	limA, _ := l.limit(1000)
	limB, okB := l.limit(1000)
	if !okB || limB != 1000 {
		t.Fatalf("second partition's limit %d %v while the first reads, want 1000", limB, okB)
	}
	if keep, retry := l.charge(limA, 100); !keep || retry {
		t.Fatalf("first charge keep %v retry %v", keep, retry)
	}
	if keep, retry := l.charge(limB, 200); !keep || retry {
		t.Fatalf("second charge keep %v retry %v: a partition with data starved", keep, retry)
	}

	seed := uint64(os.Getpid())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 12))
	for round := range 3000 {
		bytesMax := int64(100 + rng.IntN(2000))
		n := 1 + rng.IntN(6)
		type part struct {
			batches      []int64
			partMax      int32
			limit, got   int64
			read         int64
			state, tries int // 0: take a limit, 1: charge, 2: done
		}
		parts := make([]part, n)
		want := int64(0) // every partition's read with the whole bound to itself
		for i := range parts {
			p := &parts[i]
			for range rng.IntN(5) {
				p.batches = append(p.batches, int64(1+rng.IntN(400)))
			}
			p.partMax = int32(rng.IntN(int(2 * bytesMax)))
			if p.partMax <= 0 {
				p.partMax = 0 // no partition limit
			}
			lim := bytesMax
			if p.partMax > 0 {
				lim = min(lim, int64(p.partMax))
			}
			want += readModel(p.batches, lim)
		}
		l := &fetchLimits{bytesMax: bytesMax}
		l.reset()
		for done := 0; done < n; {
			p := &parts[rng.IntN(n)]
			switch p.state {
			case 0:
				lim, ok := l.limit(p.partMax)
				if !ok || len(p.batches) == 0 {
					p.state, done = 2, done+1
					continue
				}
				p.limit, p.read, p.state = lim, readModel(p.batches, lim), 1
			case 1:
				keep, retry := l.charge(p.limit, p.read)
				switch {
				case retry:
					if p.tries++; p.tries >= n {
						t.Fatalf("round %d: partition retried %d times with %d partitions", round, p.tries, n)
					}
					p.state = 0
					continue
				case keep:
					p.got = p.read
				}
				p.state, done = 2, done+1
			}
		}
		total, over := int64(0), 0
		for i := range parts {
			p := &parts[i]
			total += p.got
			if p.got > 0 && p.got > p.limit {
				over++
			}
			lim := bytesMax
			if p.partMax > 0 {
				lim = min(lim, int64(p.partMax))
			}
			firstFits := len(p.batches) > 0 && p.batches[0] <= lim // else the first-batch rule decides
			if want <= bytesMax && firstFits && p.got != readModel(p.batches, lim) {
				t.Fatalf("round %d: bound %d fits all reads (%d bytes), partition %d (max %d, batches %v) got %d", round, bytesMax, want, i, p.partMax, p.batches, p.got)
			}
		}
		if over > 1 {
			t.Fatalf("round %d: %d partitions over their limit; only the first may be", round, over)
		}
		if total > bytesMax && over == 0 {
			t.Fatalf("round %d: answer %d bytes over the bound %d", round, total, bytesMax)
		}
	}
}
