//go:build !invariants

package engine

const invariantsEnabled = false
