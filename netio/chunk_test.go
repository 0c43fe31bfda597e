package netio

import (
	"fmt"
	"testing"
)

func TestNextFrameChunkDoubles(t *testing.T) {
	total := 5<<20 + 3
	var sizes []int
	for filled := 0; filled < total; {
		chunk := nextFrameChunk(filled, total)
		if chunk <= 0 {
			t.Fatalf("no progress at %d", filled)
		}
		filled += chunk
		sizes = append(sizes, filled)
	}
	want := []int{1 << 20, 2 << 20, 4 << 20, total}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Fatalf("allocation steps %v, want %v", sizes, want)
	}
	if nextFrameChunk(0, 0) != 0 || nextFrameChunk(0, 100) != 100 {
		t.Fatal("small frames take one chunk")
	}
}
