//go:build !invariants && !race

package batch

// invariantsEnabled turns on expensive self-checks (every built batch is validated and
// decoded before Build returns). On with -tags invariants and under -race.
const invariantsEnabled = false
