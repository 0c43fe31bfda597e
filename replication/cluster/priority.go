package cluster

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// catchUpNice is how much lower than the broker's own the CPU priority of catch-up work
// is (Linux nice, per thread): a catching-up replica's fetcher and the leader's copy of
// its responses give way to the shard loops (produces, in-sync fetches) and to every
// other thread of the machine running at the broker's priority.
const catchUpNice = 10

// lowerPriority locks the calling goroutine to its OS thread and lowers that thread's CPU
// priority by catchUpNice. The goroutine must never unlock the thread: when it returns,
// the Go runtime then ends the thread with it, so that no other goroutine ever runs at the
// lowered priority. Raising one's own nice value needs no privilege; a failure (another
// OS) leaves the priority as it was.
func lowerPriority() {
	runtime.LockOSThread()
	tid := unix.Gettid()
	if cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil {
		// The raw syscall answers 20 - nice.
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-cur+catchUpNice, 19))
	}
}
