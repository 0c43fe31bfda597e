package bench

import "testing"

func TestKeyChooserDistributions(t *testing.T) {
	const draws, partitions = 20000, 8
	base := Workload{PartitionsPerTopic: partitions}

	// none: partition -1 when the client places null keys, round-robin when it cannot;
	// roundrobin: round-robin whatever the client can do.
	none := base
	none.KeyDistribution = KeysNone
	if p, key := newKeyChooser(none, 3, true).choose(); p != -1 || key != nil {
		t.Fatalf("none with a placing client: partition %d key %q, want -1 and no key", p, key)
	}
	roundRobin := base
	roundRobin.KeyDistribution = KeysRoundRobin
	for _, c := range []struct {
		w            Workload
		clientPlaces bool
	}{{none, false}, {roundRobin, true}, {roundRobin, false}} {
		k := newKeyChooser(c.w, 3, c.clientPlaces)
		first, key := k.choose()
		if key != nil {
			t.Fatalf("%s produced a key", c.w.KeyDistribution)
		}
		for i := 1; i < 20; i++ {
			p, _ := k.choose()
			if p != (first+i)%partitions {
				t.Fatalf("%s (client places: %v): null keys not round-robin: %d after %d", c.w.KeyDistribution, c.clientPlaces, p, first)
			}
		}
	}

	sticky := base
	sticky.KeyDistribution, sticky.MessageSize = KeysSticky, 1024
	k := newKeyChooser(sticky, 4, true)
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
	k = newKeyChooser(hot, 5, true)
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
	k = newKeyChooser(random, 9, true)
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
	k := newKeyChooser(Workload{PartitionsPerTopic: 16, KeyDistribution: KeysHot, HotKeyShare: 0.8}, 1, true)
	b.ReportAllocs()
	b.SetBytes(16)
	for range b.N {
		k.choose()
	}
}
