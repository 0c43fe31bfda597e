// Package ringlogdriver plugs ringlog's bundled client (netio/client) into the benchmark
// framework. It is the only part of bench/ that talks to a ringlog broker.
//
// The client is being built concurrently; until it lands this driver refuses to run with
// bench.ErrNotImplemented rather than measuring something that is not ringlog.
package ringlogdriver

import (
	"fmt"

	"github.com/ringlog/ringlog/bench"
)

// DefaultAddress is where ringlogd listens unless told otherwise.
const DefaultAddress = "127.0.0.1:9400"

func init() {
	bench.RegisterDriver("ringlog", Open)
}

// Open connects to a ringlog broker.
func Open(address string, _ bench.Workload) (bench.Driver, error) {
	if address == "" {
		address = DefaultAddress
	}
	return nil, fmt.Errorf("ringlog driver for %s: netio/client is not on main yet: %w", address, bench.ErrNotImplemented)
}
