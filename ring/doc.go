// Package ring owns ringlog's I/O substrate: a pure-Go io_uring binding over
// golang.org/x/sys/unix (setup, mmap'd SQ/CQ, submit/wait, op prep, registered buffers and
// files, probe), the per-core reactor (pinned loop, completion dispatch, timers, cross-core
// mailboxes), and a syscall fallback behind the same interface.
//
// It must not know about logs, partitions or the protocol.
package ring
