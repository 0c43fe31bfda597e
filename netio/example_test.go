package netio

import (
	"bytes"
	"testing"
)

// TestDocExample keeps the hex example at the end of docs/protocol.md true.
func TestDocExample(t *testing.T) {
	got := AppendRequest(nil, 1, &MetadataRequest{Topics: []string{"t"}})
	want := []byte{0, 0, 0, 0x0f, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 't'}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}
}
