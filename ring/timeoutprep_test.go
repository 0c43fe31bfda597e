package ring

import (
	"testing"

	"golang.org/x/sys/unix"
)

// pipeFds returns a pipe closed when the test ends.
func pipeFds(t *testing.T) [2]int {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p
}

// TestTimeoutSpecCopiedAtSubmit: io_uring copies a TIMEOUT's and a LINK_TIMEOUT's timespec
// when it prepares the SQE, at submit; the syscall backend read it when the timeout
// started (a TIMEOUT later in a chain, a LINK_TIMEOUT when its request parked), so a
// caller that reused the timespec after Submit got the new value (here 0: an immediate
// -ETIME instead of a timeout 60 s away).
func TestTimeoutSpecCopiedAtSubmit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		p := pipeFds(t)
		long, guard := &Timespec{Sec: 60}, &Timespec{Sec: 60}
		pinForTest(t, long, guard)
		sqe := mustSQE(t, r)
		sqe.PrepPollAdd(p[0], unix.POLLIN)
		sqe.SetLink()
		sqe.UserData = 1
		sqe = mustSQE(t, r)
		sqe.PrepTimeout(long, 0, 0) // starts once the poll completed
		sqe.UserData = 2
		sqe = mustSQE(t, r)
		sqe.PrepPollAdd(p[0], unix.POLLPRI) // never ready on a pipe: parks, guarded by a link timeout
		sqe.SetLink()
		sqe.UserData = 3
		sqe = mustSQE(t, r)
		sqe.PrepLinkTimeout(guard, 0)
		sqe.UserData = 10
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		*long, *guard = Timespec{}, Timespec{} // reused after Submit
		if _, err := unix.Write(p[1], []byte{1}); err != nil {
			t.Fatal(err)
		}
		if c := waitCQEs(t, r, 1)[0]; c.UserData != 1 || c.Res&unix.POLLIN == 0 {
			t.Fatalf("poll: %+v", c)
		}
		noCompletion(t, r, "timeouts of 60 s whose timespecs were zeroed after Submit")
		cancelParked(t, r, 2)
		sqe = mustSQE(t, r)
		sqe.PrepCancel(3, 0)
		sqe.UserData = 5
		m := byUserData(t, waitCQEs(t, r, 3))
		if m[3].Res != -int32(unix.ECANCELED) || m[5].Res != 0 || m[10].Res != -int32(unix.ECANCELED) {
			t.Fatalf("cancel of the guarded poll: %+v", m)
		}
	})
}

// TestTimeoutSpecChecks: a nil or negative timespec fails at submit on both backends; for
// a LINK_TIMEOUT that fails the chain it guards without running it.
func TestTimeoutSpecChecks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		negative := &Timespec{Sec: -1}
		pinForTest(t, negative)
		sqe := mustSQE(t, r)
		sqe.PrepTimeout(nil, 0, 0)
		sqe.UserData = 1
		sqe = mustSQE(t, r)
		sqe.PrepTimeout(negative, 0, 0)
		sqe.UserData = 2
		sqe = mustSQE(t, r)
		sqe.PrepNop()
		sqe.SetLink()
		sqe.UserData = 3
		sqe = mustSQE(t, r)
		sqe.PrepLinkTimeout(nil, 0)
		sqe.UserData = 4
		m := byUserData(t, waitCQEs(t, r, 4))
		want := map[uint64]int32{1: -int32(unix.EFAULT), 2: -int32(unix.EINVAL), 3: -int32(unix.ECANCELED), 4: -int32(unix.EFAULT)}
		for ud, res := range want {
			if m[ud].Res != res {
				t.Errorf("request %d: res %d, want %d (all: %+v)", ud, m[ud].Res, res, m)
			}
		}
	})
}
