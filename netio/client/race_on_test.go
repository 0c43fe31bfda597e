//go:build race

package client

// RaceEnabled: the tests run under the race detector, which allocates (and drops pooled
// objects at random): allocation checks skip.
const RaceEnabled = true
