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

func TestNearest(t *testing.T) {
	keys := []string{"retention.ms", "retention.bytes", "segment.ms", "segment.bytes"}
	for _, c := range []struct {
		word string
		max  int
		want string
	}{
		{"retention.msec", 3, "retention.ms"},
		{"retention.msec", 1, ""},       // 2 edits away, more than allowed
		{"segment.xs", 1, "segment.ms"}, // one substitution
		{"b", 0, ""},                    // nothing is that close
		{"segment.ms", 0, "segment.ms"}, // itself
		{"x", 20, "segment.ms"},         // far from all: the fewest edits (10) wins
	} {
		if got := Nearest(c.word, keys, c.max); got != c.want {
			t.Errorf("Nearest(%q, %d) = %q, want %q", c.word, c.max, got, c.want)
		}
	}
	if got := Nearest("ab", []string{"ad", "ac"}, 1); got != "ac" {
		t.Errorf("a tie went to %q, want the alphabetically first, ac", got)
	}
}
