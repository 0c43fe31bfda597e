package group

import (
	"flag"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0 = from the clock; the seed is printed)")

// seed returns the random seed of a test and prints it, so that a failure can be replayed
// with go test ./engine/group -run NAME -seed N.
func seed(t *testing.T) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}
