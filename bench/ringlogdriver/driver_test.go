package ringlogdriver

import (
	"errors"
	"testing"

	"github.com/ringlog/ringlog/bench"
)

// The slot must refuse clearly until the real client exists, never fake a measurement.
func TestDriverSlotRefusesUntilClientLands(t *testing.T) {
	driver, err := bench.OpenDriver("ringlog", "", bench.Workload{})
	if !errors.Is(err, bench.ErrNotImplemented) || driver != nil {
		t.Fatalf("driver %v err %v", driver, err)
	}
}
