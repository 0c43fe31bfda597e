//go:build !invariants

package ring

const invariantsEnabled = false
