//go:build invariants

package engine

const invariantsEnabled = true
