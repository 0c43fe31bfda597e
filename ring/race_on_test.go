//go:build race

package ring

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
