//go:build race

package netio_test

const raceEnabled = true
