//go:build !invariants && !race

package group

// invariantsEnabled turns on expensive self-checks (the whole coordinator is checked after
// every input). On with -tags invariants and under -race.
const invariantsEnabled = false
