// Package textdist owns the edit distance used to suggest the nearest known name for a
// mistyped one: ringlogd's flags and configuration keys, topic config keys (engine) and the doc
// checker's anchors.
package textdist

// Levenshtein returns the number of single-byte insertions, deletions and substitutions that
// turn a into b. It allocates two rows of len(b)+1 ints; callers pass short names.
func Levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Nearest returns the candidate closest to word, at most maxDistance edits away (ties go to
// the alphabetically first), or "" when none is that close.
func Nearest(word string, candidates []string, maxDistance int) string {
	best, bestDistance := "", maxDistance+1
	for _, c := range candidates {
		if d := Levenshtein(word, c); d < bestDistance || d == bestDistance && c < best {
			best, bestDistance = c, d
		}
	}
	return best
}
