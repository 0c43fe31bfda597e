package kafka

import (
	"encoding/binary"
	"testing"
)

// TestFindMarker: a marker is taken only behind its length prefix, so the same 16 bytes
// elsewhere in a response (say inside a topic name) are skipped.
func TestFindMarker(t *testing.T) {
	marker := []byte("0123456789abcdef")
	var b []byte
	b = append(b, marker...) // no prefix: not it
	b = binary.BigEndian.AppendUint32(b, 17)
	b = append(b, marker...) // wrong prefix: not it
	want := len(b) + 4
	b = binary.BigEndian.AppendUint32(b, recordsMarkerBytes)
	b = append(b, marker...)
	if at, prefix := findMarker(b, 0, marker, false); at != want || prefix != 4 {
		t.Fatalf("non-flexible: at %d prefix %d, want %d 4", at, prefix, want)
	}
	flex := append(append([]byte{5}, marker...), append([]byte{recordsMarkerBytes + 1}, marker...)...)
	if at, prefix := findMarker(flex, 0, marker, true); at != 18 || prefix != 1 {
		t.Fatalf("flexible: at %d prefix %d", at, prefix)
	}
	if at, _ := findMarker(b, want+1, marker, false); at != -1 {
		t.Fatalf("found a marker past the last one at %d", at)
	}
}
