//go:build invariants

package controller

// invariantsEnabled compiles in the expensive checks: the FSM re-encodes the published
// metadata at every command to prove nobody wrote it (FSM.checkPublished).
const invariantsEnabled = true
