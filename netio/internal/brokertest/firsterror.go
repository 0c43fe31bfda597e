package brokertest

import (
	"sync/atomic"
	"testing"
)

// FirstError keeps the first error of a quota test's client goroutines, for the test's
// own goroutine to report (t.Fatal may not be called from the others).
type FirstError struct{ err atomic.Pointer[error] }

// Set keeps err unless an error was kept before.
func (f *FirstError) Set(err error) { f.err.CompareAndSwap(nil, &err) }

// Reported reports the kept error with tb.Error, if there is one, and says whether there was.
func (f *FirstError) Reported(tb testing.TB) bool {
	tb.Helper()
	if err := f.err.Load(); err != nil {
		tb.Error(*err)
		return true
	}
	return false
}
