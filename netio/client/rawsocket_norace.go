//go:build !race

package client

// rawSocketOn: plain TCP connections use rawSocket (see rawsocket_race.go for why race
// builds do not).
const rawSocketOn = true
