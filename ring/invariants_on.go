//go:build invariants

package ring

// invariantsEnabled turns on checks too costly for production builds: with it, Begin also
// verifies it runs on the reactor's owning thread (one gettid per op), and the loop moves its
// goroutine's stack before each blocking wait (moveStack).
const invariantsEnabled = true
