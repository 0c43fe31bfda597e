package bench

import "testing"

func TestKeyChooserDistributions(t *testing.T) {
	const draws, partitions = 20000, 8
	base := Workload{PartitionsPerTopic: partitions}

	none := base
	none.KeyDistribution = KeysNone
	k := newKeyChooser(none, 3)
	first, key := k.choose()
	if key != nil {
		t.Fatal("none distribution produced a key")
	}
	for i := 1; i < 20; i++ {
		p, _ := k.choose()
		if p != (first+i)%partitions {
			t.Fatalf("null keys not round-robin: %d after %d", p, first)
		}
	}

	sticky := base
	sticky.KeyDistribution, sticky.MessageSize = KeysSticky, 1024
	k = newKeyChooser(sticky, 4)
	counts := make([]int, partitions)
	last, run := -1, 0
	for i := range draws {
		p, key := k.choose()
		if key != nil {
			t.Fatal("sticky distribution produced a key")
		}
		counts[p]++
		if p == last {
			run++
			continue
		}
		if last >= 0 && run != stickyBatchBytes/1024 {
			t.Fatalf("draw %d: %d messages of 1 KiB on partition %d, want %d before moving on", i, run, last, stickyBatchBytes/1024)
		}
		last, run = p, 1
	}
	for p, c := range counts {
		if c < draws/partitions*7/10 || c > draws/partitions*13/10 {
			t.Fatalf("sticky partitions uneven: partition %d got %d of %d", p, c, draws)
		}
	}

	hot := base
	hot.KeyDistribution, hot.HotKeyShare = KeysHot, 0.8
	counts = make([]int, partitions)
	k = newKeyChooser(hot, 5)
	hotPartition, _ := k.forKey(hotKey)
	for range draws {
		p, key := k.choose()
		if len(key) == 0 {
			t.Fatal("hot distribution produced a null key")
		}
		counts[p]++
	}
	share := float64(counts[hotPartition]) / draws
	if share < 0.8 || share > 0.86 { // 0.8 plus the hot partition's 1/8 of the other 0.2
		t.Fatalf("hot partition took %.3f of messages", share)
	}

	random := base
	random.KeyDistribution = KeysRandom
	counts = make([]int, partitions)
	k = newKeyChooser(random, 9)
	for range draws {
		p, _ := k.choose()
		counts[p]++
	}
	for p, c := range counts {
		if c < draws/partitions*8/10 || c > draws/partitions*12/10 {
			t.Fatalf("random keys uneven: partition %d got %d of %d", p, c, draws)
		}
	}
}

func BenchmarkKeyChooserHot(b *testing.B) {
	k := newKeyChooser(Workload{PartitionsPerTopic: 16, KeyDistribution: KeysHot, HotKeyShare: 0.8}, 1)
	b.ReportAllocs()
	b.SetBytes(16)
	for range b.N {
		k.choose()
	}
}
