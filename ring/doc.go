// Package ring owns ringlog's I/O substrate: a pure-Go io_uring binding over
// golang.org/x/sys/unix (setup, mmap'd SQ/CQ, submit/wait, op prep, registered buffers and
// files, probe), the per-core reactor (pinned loop, completion dispatch, timers, cross-core
// mailboxes), a buffer arena, and a syscall fallback that interprets the same SQEs behind the
// same Ring interface.
//
// Ownership: a Ring and a Reactor belong to the one locked OS thread that created them
// (StartPinned does LockOSThread, sched_setaffinity, then setup). Only Reactor.Post,
// Reactor.PostFrom's target side and Reactor.Stop may be called from other goroutines,
// besides the read-only MailboxDepth, ForeignFileIO and OnOwnerThread. (A FileIO call off the
// owner's thread is a caller bug: it is served with plain system calls and logged.)
// Memory handed to the kernel must stay put until its completion: arena buffers (mmap'd,
// outside the Go heap) or Go heap memory pinned with runtime.Pinner (Op.Pin, the *Async
// helpers and the FileIO methods pin for you), never a goroutine stack (the prep helpers
// make their pointer arguments escape, so the compiler never puts them there).
//
// It must not know about logs, partitions or the protocol.
//
// File map: abi.go (kernel structs and constants), sqe.go (prep helpers), ring.go (Ring,
// Config, Open and the backend choice), uring.go (io_uring backend), sysring.go (syscall
// backend), reactor.go (Reactor, FileIO, timers), mailbox.go (bounded MPSC queue),
// arena.go (buffer arena), splice.go (file→pipe→socket helper). docs/ring.md has the
// kernel versions, the fallback rules and measured numbers.
package ring
