//go:build race

package controller

// raceEnabled: the race detector slows the randomized tests ~20×; they run fewer rounds.
const raceEnabled = true
