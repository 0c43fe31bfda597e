// Package benchtest holds checks that the tests of benchmark drivers share (including the
// drivers in the bench/peers module).
package benchtest

import (
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/bench"
)

// RunDelivered runs w on d (50 ms samples) and fails t unless at least minPublished
// messages were published without errors or bad payloads and at least 80 % of them came
// back to the consumers with end-to-end latencies recorded. It returns the result.
func RunDelivered(t testing.TB, w bench.Workload, d bench.Driver, minPublished int64) *bench.Result {
	t.Helper()
	result, err := bench.Run(context.Background(), bench.RunOptions{Workload: w, Driver: d, SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if result.Publish.Messages < max(minPublished, 1) || result.Errors.Publish != 0 || result.Errors.BadPayloads != 0 {
		t.Fatalf("publish %+v errors %+v", result.Publish, result.Errors)
	}
	if result.Consume.Messages < result.Publish.Messages*8/10 || result.EndToEnd.Count == 0 {
		t.Fatalf("consume %+v of %+v", result.Consume, result.Publish)
	}
	return result
}
