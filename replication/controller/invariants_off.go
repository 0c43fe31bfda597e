//go:build !invariants

package controller

// invariantsEnabled: see invariants_on.go.
const invariantsEnabled = false
