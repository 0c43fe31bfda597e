package textdist

import "testing"

func TestLevenshtein(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"segment-bytes", "segment-bytes", 0},
		{"segment-byte", "segment-bytes", 1},  // insertion
		{"segmnet-bytes", "segment-bytes", 2}, // transposition = two edits
		{"kitten", "sitting", 3},
		{"flush-ms", "flush-mx", 1}, // substitution
	} {
		if got := Levenshtein(c.a, c.b); got != c.want {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Levenshtein(c.b, c.a); got != c.want {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d (not symmetric)", c.b, c.a, got, c.want)
		}
	}
}
