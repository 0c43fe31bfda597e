// Package benchtest holds checks that the tests of benchmark drivers share (including the
// drivers in the bench/peers module).
package benchtest

import (
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/bench"
)

const sampleInterval = 50 * time.Millisecond

// RunDelivered runs w on d (50 ms samples; the measured window stays open past w's duration
// until minPublished messages were acknowledged and one came back in it, bounded by the
// runner: see bench.RunOptions.MeasuredMessagesMin) and fails t unless at least minPublished
// messages were published in the measured window without errors or bad payloads, and every
// message acknowledged in the whole run came back to the consumers by the end of the drain
// (bench.Result.AllDelivered; not a share of the window, which a stall on a loaded machine
// moves), with end-to-end latencies recorded. It returns the result.
func RunDelivered(t testing.TB, w bench.Workload, d bench.Driver, minPublished int64) *bench.Result {
	t.Helper()
	minPublished = max(minPublished, 1)
	result, err := bench.Run(context.Background(), bench.RunOptions{Workload: w, Driver: d, SampleInterval: sampleInterval, MeasuredMessagesMin: minPublished})
	if err != nil {
		t.Fatal(err)
	}
	if result.Publish.Messages < minPublished || result.Errors.Publish != 0 || result.Errors.BadPayloads != 0 {
		t.Fatalf("publish %+v errors %+v", result.Publish, result.Errors)
	}
	if !result.AllDelivered() || result.EndToEnd.Count == 0 {
		t.Fatalf("consumed %d of %d published over the run (window: consume %+v of %+v), e2e %d",
			result.Totals.Consumed, result.Totals.Published, result.Consume, result.Publish, result.EndToEnd.Count)
	}
	return result
}

// Run runs w on d with 50 ms samples and fails t on an error; the caller checks the result.
func Run(t testing.TB, w bench.Workload, d bench.Driver) *bench.Result {
	t.Helper()
	result, err := bench.Run(context.Background(), bench.RunOptions{Workload: w, Driver: d, SampleInterval: sampleInterval})
	if err != nil {
		t.Fatal(err)
	}
	return result
}

// OpenAndRun opens the driver called name on address for w, runs w on it (Run) and closes
// the driver.
func OpenAndRun(t testing.TB, name, address string, w bench.Workload) *bench.Result {
	t.Helper()
	driver, err := bench.OpenDriver(name, address, w)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Close()
	return Run(t, w, driver)
}
