package netio

import (
	"fmt"
	"testing"
)

func TestNextFrameChunkDoubles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   int
		arrived int // bytes waiting when the header is parsed
		want    []int
	}{
		{"nothing arrived: the minimum, then doubling", 64<<10 + 3, 0, []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 64<<10 + 3}},
		{"all arrived: one chunk", 5<<20 + 3, 5<<20 + 3, []int{5<<20 + 3}},
		{"part arrived: that much, then doubling", 5 << 20, 1 << 20, []int{1 << 20, 2 << 20, 4 << 20, 5 << 20}},
		{"small frame", 100, 0, []int{100}},
		{"empty frame", 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sizes []int
			arrived := tc.arrived
			for filled := 0; filled < tc.total; {
				chunk := nextFrameChunk(filled, tc.total, arrived)
				if chunk <= 0 {
					t.Fatalf("no progress at %d", filled)
				}
				filled += chunk
				arrived = 0
				sizes = append(sizes, filled)
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.want) {
				t.Fatalf("allocation steps %v, want %v", sizes, tc.want)
			}
		})
	}
}
