package client

import "testing"

// The next sticky run goes to the less loaded of two partitions drawn among the others
// (Kafka's adaptive partitioning, by batches queued): scripted draws, real queue state.
func TestNextStickyPrefersTheShorterQueue(t *testing.T) {
	p := &Producer{parts: map[topicPartition]*partState{}}
	queue := func(partition int32, sealed int, open bool) {
		ps := &partState{topicPartition: topicPartition{"t", partition}, sealed: make([]*sealedBatch, sealed)}
		if open {
			ps.open = []pendingRecord{{}}
		}
		p.parts[ps.topicPartition] = ps
	}
	queue(1, 4, false) // 4 batches waiting for their acknowledgement
	queue(2, 1, true)  // 2: one sealed, one open
	queue(3, 0, false)
	for _, c := range []struct {
		draws []int // intN's answers: offsets past last = 0
		want  int32
	}{
		{[]int{0, 1}, 2}, // partitions 1 (4 queued) and 2 (2): 2
		{[]int{1, 0}, 2}, // the other way round
		{[]int{2, 0}, 3}, // 3 (nothing queued, no state) beats 1
		{[]int{1, 2}, 3},
		{[]int{0, 0}, 1}, // the same partition twice: it
		{[]int{4, 4}, 5}, // partitions the producer never wrote to count as empty
	} {
		draws := c.draws
		p.intN = func(n int) int {
			if n != 7 {
				t.Fatalf("drew among %d partitions, want the 7 other than the last", n)
			}
			d := draws[0]
			draws = draws[1:]
			return d
		}
		if got := p.nextStickyLocked("t", 8, 0); got != c.want {
			t.Errorf("draws %v: next run on partition %d, want %d", c.draws, got, c.want)
		}
	}
	// No last partition (the topic's first run): any partition.
	p.intN = func(n int) int {
		if n != 8 {
			t.Fatalf("first run drew among %d partitions, want 8", n)
		}
		return 0
	}
	if got := p.nextStickyLocked("t", 8, -1); got != 0 {
		t.Errorf("first run on %d, want 0", got)
	}
}
