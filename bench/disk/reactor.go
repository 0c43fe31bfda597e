package disk

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/ring"
)

// ReactorAsync keeps len(buffers) ops in flight on one ring.Reactor: every completion
// immediately submits the slot's next op, so the device always sees that queue depth. It must
// be used on the reactor's own locked OS thread (the one that created it).
type ReactorAsync struct{ Reactor *ring.Reactor }

// Name is the reactor's backend ("io_uring", or "syscall" when io_uring is unavailable).
func (a ReactorAsync) Name() string { return a.Reactor.Backend() }

// Run implements Async.
func (a ReactorAsync) Run(fd int, write, syncEach bool, buffers [][]byte, next func(int) (int64, bool), lat *bench.Latency) (int64, error) {
	var (
		ops      int64
		inFlight int
		firstErr error
		starts   = make([]time.Time, len(buffers))
	)
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	var issue func(slot int)
	complete := func(slot int) {
		lat.Record(time.Since(starts[slot]))
		ops++
		issue(slot)
	}
	syncThenComplete := func(slot int) {
		err := a.Reactor.Submit(func(sqe *ring.SQE) { sqe.PrepFsync(fd, true) }, func(res int32, _ uint32) {
			inFlight--
			if res < 0 {
				fail(fmt.Errorf("fdatasync fd %d: %w", fd, unix.Errno(-res)))
				return
			}
			complete(slot)
		})
		if err != nil {
			fail(fmt.Errorf("submit fdatasync: %w", err))
			return
		}
		inFlight++
	}
	issue = func(slot int) {
		if firstErr != nil {
			return
		}
		off, ok := next(slot)
		if !ok {
			return
		}
		buffer := buffers[slot]
		starts[slot] = time.Now()
		err := a.Reactor.Submit(func(sqe *ring.SQE) {
			if write {
				sqe.PrepWrite(fd, buffer, uint64(off))
			} else {
				sqe.PrepRead(fd, buffer, uint64(off))
			}
		}, func(res int32, _ uint32) {
			inFlight--
			switch {
			case res < 0:
				fail(fmt.Errorf("io at %d on fd %d: %w", off, fd, unix.Errno(-res)))
			case int(res) != len(buffer):
				fail(fmt.Errorf("short io at %d: %d of %d bytes", off, res, len(buffer)))
			case write && syncEach:
				syncThenComplete(slot)
			default:
				complete(slot)
			}
		})
		if err != nil {
			fail(fmt.Errorf("submit: %w", err))
			return
		}
		inFlight++
	}
	for slot := range buffers {
		issue(slot)
	}
	for inFlight > 0 {
		if err := a.Reactor.RunOnce(true); err != nil {
			return ops, fmt.Errorf("reactor: %w", err)
		}
	}
	return ops, firstErr
}
