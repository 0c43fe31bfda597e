// Package e2e holds the black-box tests of the real binaries: TestMain builds ringlogd
// and ringlog from ./cmd once, and each test starts ringlogd as a child process on a temp
// data directory and a free 127.0.0.1 port, then drives it through the bundled client
// (netio/client), the ringlog CLI and raw TCP connections: produce and consume 100k
// records, restart, kill -9 under flush.always, the CLI's commands and exit codes, and
// hostile or stalled clients.
//
// It has no non-test code and must not reach into the broker's packages (engine, shards,
// the server): only the wire, the client and the binaries. Slow variants (more kill -9
// rounds, more records) run with RINGLOG_E2E_SOAK=1; the adversarial suite's larger
// attacks with RINGLOG_E2E_LONG=1 as well; RINGLOG_E2E_BROKER_FLAGS adds ringlogd flags
// to every broker (e.g. "--io syscall"); see docs/operations.md.
package e2e
