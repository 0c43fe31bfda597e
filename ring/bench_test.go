package ring

import (
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Benchmarks. Writes go to a file in the test's temp dir (ext4 here, page cache: these
// measure the submission path, not the disk); the file offset wraps at benchFileBytes so
// the file stays small.
//
//	go test -run '^$' -bench . -benchmem ./ring/
const benchFileBytes = 64 << 20

func benchBackends(b *testing.B, fn func(b *testing.B, backend string)) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			if backend == "uring" {
				if why := uringUnavailable(); why != "" {
					b.Skipf("io_uring unavailable: %s", why)
				}
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fn(b, backend)
		})
	}
}

// BenchmarkSeqWrite: sequential writes of 4 KiB and 1 MiB through the reactor's FileIO
// (one op per submit, waiting for it) against os.File.WriteAt in the same run.
func BenchmarkSeqWrite(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			benchBackends(b, func(b *testing.B, backend string) {
				r := newReactor(b, backend, Config{Entries: 64, SingleIssuer: true, DeferTaskrun: true})
				f, _ := tempFile(b)
				arena, err := NewArena(size.bytes, 1)
				if err != nil {
					b.Fatal(err)
				}
				buf, _, _ := arena.Get()
				buf = buf[:size.bytes]
				fd := int(f.Fd())
				b.SetBytes(int64(size.bytes))
				b.ReportAllocs()
				b.ResetTimer()
				off := int64(0)
				for i := 0; i < b.N; i++ {
					if _, err := r.Pwrite(fd, buf, off); err != nil {
						b.Fatal(err)
					}
					off = (off + int64(size.bytes)) % benchFileBytes
				}
			})
			b.Run("os.File.WriteAt", func(b *testing.B) {
				f, _ := tempFile(b)
				buf := make([]byte, size.bytes)
				b.SetBytes(int64(size.bytes))
				b.ReportAllocs()
				b.ResetTimer()
				off := int64(0)
				for i := 0; i < b.N; i++ {
					if _, err := f.WriteAt(buf, off); err != nil {
						b.Fatal(err)
					}
					off = (off + int64(size.bytes)) % benchFileBytes
				}
			})
		})
	}
}

// BenchmarkBatchWrite: 4 KiB sequential writes, 64 SQEs per submit vs 1, on the raw ring.
// b.N counts writes, so ns/op is per write.
func BenchmarkBatchWrite(b *testing.B) {
	for _, perSubmit := range []int{1, 64} {
		b.Run(map[int]string{1: "1perSubmit", 64: "64perSubmit"}[perSubmit], func(b *testing.B) {
			benchBackends(b, func(b *testing.B, backend string) {
				r := openRing(b, backend, Config{Entries: 64, CQEntries: 128})
				f, _ := tempFile(b)
				arena, err := NewArena(4096, 1)
				if err != nil {
					b.Fatal(err)
				}
				buf, _, _ := arena.Get()
				fd := int(f.Fd())
				cqes := make([]CQE, 64)
				b.SetBytes(4096)
				b.ReportAllocs()
				b.ResetTimer()
				off := uint64(0)
				for done := 0; done < b.N; {
					batch := min(perSubmit, b.N-done)
					for i := 0; i < batch; i++ {
						sqe := r.GetSQE()
						sqe.PrepWrite(fd, buf, off)
						sqe.UserData = off
						off = (off + 4096) % benchFileBytes
					}
					if _, err := r.SubmitAndWait(uint32(batch), 0); err != nil {
						b.Fatal(err)
					}
					for got := 0; got < batch; {
						n := r.PeekCQEs(cqes)
						for _, c := range cqes[:n] {
							if c.Res != 4096 {
								b.Fatalf("write res %d", c.Res)
							}
						}
						got += n
						if n == 0 {
							r.SubmitAndWait(uint32(batch-got), 0)
						}
					}
					done += batch
				}
			})
		})
	}
}

// BenchmarkSubmitReap is the bare submit+reap path (NOP): it must allocate 0 bytes per op.
func BenchmarkSubmitReap(b *testing.B) {
	benchBackends(b, func(b *testing.B, backend string) {
		r := openRing(b, backend, Config{Entries: 64})
		cqes := make([]CQE, 8)
		b.ReportAllocs()
		b.SetBytes(sqeSize)
		for i := 0; i < b.N; i++ {
			sqe := r.GetSQE()
			sqe.PrepNop()
			sqe.UserData = uint64(i)
			if _, err := r.SubmitAndWait(1, 0); err != nil {
				b.Fatal(err)
			}
			if r.PeekCQEs(cqes) != 1 {
				b.Fatal("no completion")
			}
		}
	})
}

// BenchmarkReactorSubmit is the reactor's callback path: Begin/Submit a NOP, one loop turn.
func BenchmarkReactorSubmit(b *testing.B) {
	benchBackends(b, func(b *testing.B, backend string) {
		r := newReactor(b, backend, Config{Entries: 64, SingleIssuer: true, DeferTaskrun: true})
		completed := 0
		done := func(res int32, _ uint32) { completed++ }
		b.ReportAllocs()
		b.SetBytes(sqeSize)
		for i := 0; i < b.N; i++ {
			op, err := r.Begin(done)
			if err != nil {
				b.Fatal(err)
			}
			op.SQE().PrepNop()
			if err := op.Submit(); err != nil {
				b.Fatal(err)
			}
			for c := completed; completed == c; {
				if err := r.RunOnce(true); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

func TestSubmitReapZeroAlloc(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 64})
		cqes := make([]CQE, 8)
		allocs := testing.AllocsPerRun(200, func() {
			sqe := r.GetSQE()
			sqe.PrepNop()
			r.SubmitAndWait(1, 0)
			r.PeekCQEs(cqes)
		})
		if allocs != 0 {
			t.Fatalf("raw submit+reap allocates %.1f per op", allocs)
		}
		re := newReactor(t, backend, Config{Entries: 64})
		re.beforeWait = nil // forceStackMove collects garbage, which allocates
		completed := 0
		done := func(int32, uint32) { completed++ }
		f, _ := tempFile(t)
		arena, _ := NewArena(4096, 1)
		buf, _, _ := arena.Get()
		allocs = testing.AllocsPerRun(200, func() {
			op, _ := re.Begin(done)
			op.SQE().PrepNop()
			op.Submit()
			for c := completed; completed == c; {
				re.RunOnce(true)
			}
			re.Pwrite(int(f.Fd()), buf[:512], 0)
		})
		if allocs != 0 {
			t.Fatalf("reactor submit+reap+Pwrite allocates %.1f per op", allocs)
		}
	})
}

// BenchmarkDirectWrite: 4 KiB O_DIRECT sequential writes from arena buffers, 32 in flight
// through the ring, against synchronous pwrite on the same kind of file. This is where
// io_uring's asynchrony pays: the syscall path waits for each device write in turn.
func BenchmarkDirectWrite(b *testing.B) {
	const depth, size = 32, 4096
	openDirect := func(b *testing.B) int {
		fd, err := unix.Open(filepath.Join(b.TempDir(), "direct"), unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			b.Skipf("O_DIRECT unavailable here: %v", err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		// Overwrite allocated blocks: extending O_DIRECT writes are serialized by ext4.
		if err := unix.Fallocate(fd, 0, 0, benchFileBytes); err != nil {
			b.Fatal(err)
		}
		return fd
	}
	benchBackends(b, func(b *testing.B, backend string) {
		r := openRing(b, backend, Config{Entries: depth, CQEntries: 2 * depth})
		fd := openDirect(b)
		arena, err := NewArena(size, depth)
		if err != nil {
			b.Fatal(err)
		}
		cqes := make([]CQE, depth)
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		off, inflight, submitted := uint64(0), 0, 0
		for done := 0; done < b.N; {
			for inflight < depth && submitted < b.N {
				sqe := r.GetSQE()
				sqe.PrepWrite(fd, arena.Buf(submitted%depth), off)
				off = (off + size) % benchFileBytes
				inflight++
				submitted++
			}
			if _, err := r.SubmitAndWait(1, 0); err != nil {
				b.Fatal(err)
			}
			n := r.PeekCQEs(cqes)
			for _, c := range cqes[:n] {
				if c.Res != size {
					b.Fatalf("direct write res %d", c.Res)
				}
			}
			inflight -= n
			done += n
		}
	})
	b.Run("pwrite", func(b *testing.B) {
		fd := openDirect(b)
		arena, err := NewArena(size, 1)
		if err != nil {
			b.Fatal(err)
		}
		buf := arena.Buf(0)
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		off := int64(0)
		for i := 0; i < b.N; i++ {
			if _, err := unix.Pwrite(fd, buf, off); err != nil {
				b.Fatal(err)
			}
			off = (off + size) % benchFileBytes
		}
	})
}

// BenchmarkSocketPingPong: a 64-byte message over loopback TCP and back, with the recv
// posted before the data arrives (so the syscall backend parks it on epoll each time).
func BenchmarkSocketPingPong(b *testing.B) {
	benchBackends(b, func(b *testing.B, backend string) {
		r := openRing(b, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(b)
		sfd, cfd := connectPair(b, r, lfd, addr)
		msg := make([]byte, 64)
		sbuf := make([]byte, 64)
		cbuf := make([]byte, 64)
		cqes := make([]CQE, 8)
		b.SetBytes(128)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			pingPong(b, r, cfd, sfd, msg, sbuf, cqes)
			pingPong(b, r, sfd, cfd, msg, cbuf, cqes)
		}
	})
}

// pingPong posts a recv on to, then sends msg from from, and reaps both completions.
func pingPong(tb testing.TB, r Ring, from, to int, msg, rbuf []byte, cqes []CQE) {
	sqe := r.GetSQE()
	sqe.PrepRecv(to, rbuf, unix.MSG_WAITALL)
	sqe.UserData = 1
	r.Submit()
	sqe = r.GetSQE()
	sqe.PrepSend(from, msg, 0)
	sqe.UserData = 2
	for got := 0; got < 2; {
		if _, err := r.SubmitAndWait(1, 0); err != nil {
			tb.Fatal(err)
		}
		n := r.PeekCQEs(cqes)
		for _, c := range cqes[:n] {
			if c.Res != int32(len(msg)) {
				tb.Fatalf("res %d", c.Res)
			}
		}
		got += n
	}
}

func TestSocketPathZeroAlloc(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		sfd, cfd := connectPair(t, r, lfd, addr)
		msg, buf, cqes := make([]byte, 64), make([]byte, 64), make([]CQE, 8)
		pingPong(t, r, cfd, sfd, msg, buf, cqes) // warm up: first park creates the fd's wait entry
		if allocs := testing.AllocsPerRun(100, func() { pingPong(t, r, cfd, sfd, msg, buf, cqes) }); allocs != 0 {
			t.Fatalf("recv/send with a parked recv allocates %.1f per exchange", allocs)
		}
	})
}

// BenchmarkPost is Reactor.Post from one goroutine, per message:
//   - awake: the fast path, to a loop that is running (Post pushes and reads awake);
//   - waiting: bursts to a loop past its last mailbox check (awake false): the first Post of
//     each 4,096-message drain cycle writes the eventfd, the others fail the wakePending CAS;
//   - loop: to a loop running on its own thread, which runs every message (retried while
//     the mailbox is full; cross-thread wake-ups included).
//
// awake and waiting drain the mailbox with the timer stopped. None allocates.
func BenchmarkPost(b *testing.B) {
	benchBackends(b, func(b *testing.B, backend string) {
		fn := func() {}
		for _, awake := range []bool{true, false} {
			name := "waiting"
			if awake {
				name = "awake"
			}
			b.Run(name, func(b *testing.B) {
				r := newReactor(b, backend, Config{})
				capacity := len(r.mailbox.slots)
				r.awake.Store(awake)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if i > 0 && i%capacity == 0 {
						b.StopTimer()
						r.drainMailbox()
						r.wakePending.Store(false) // as the wake-up's dispatch does
						b.StartTimer()
					}
					if err := r.Post(fn); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run("loop", func(b *testing.B) {
			var r *Reactor
			ready, runErr := make(chan struct{}), make(chan error, 1)
			err := StartPinned(-1, Config{Backend: backend}, func(rr *Reactor) {
				r = rr
				close(ready)
				runErr <- rr.Run()
			})
			if err != nil {
				b.Fatal(err)
			}
			<-ready
			ran := 0 // loop thread only
			count := func() { ran++ }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := postAccepted(r, count); err != nil {
					b.Fatal(err)
				}
			}
			done := make(chan int)
			if err := postAccepted(r, func() { done <- ran }); err != nil {
				b.Fatal(err)
			}
			if n := <-done; n != b.N {
				b.Fatalf("ran %d of %d messages", n, b.N)
			}
			b.StopTimer()
			r.Stop()
			if err := <-runErr; err != nil {
				b.Fatal(err)
			}
		})
	})
}
