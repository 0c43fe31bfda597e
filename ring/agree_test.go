package ring

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"
)

// The syscall backend must give the same completions as the kernel. FuzzBackendsAgree
// decodes the input into a chain-heavy batch of file ops (two bytes per op: kind, flags),
// runs it on both backends against identical files, and compares every op's result.
//
// Ops are chosen so that results do not depend on execution order (io_uring may run
// unlinked requests concurrently): writes only touch bytes [0, 4096) of an 8200-byte file,
// reads only read bytes that no write touches.

const (
	agreeKinds    = 7
	agreeOpsMax   = 32
	agreeFileSize = 8200
)

type agreeResult map[uint64]int32

var agreeTimeout = &Timespec{Sec: 30}

// runAgreeBatch runs program on backend and collects completions until it has at least
// expect of them and then two polls in a row found nothing more.
func runAgreeBatch(t *testing.T, backend string, dir string, program []byte, expect int) agreeResult {
	t.Helper()
	path := filepath.Join(dir, backend)
	if err := os.WriteFile(path, bytes.Repeat([]byte{7}, agreeFileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	r, err := Open(Config{Backend: backend, Entries: 64, CQEntries: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	skipUsed := false
	for i := 0; i+1 < len(program) && i/2 < agreeOpsMax; i += 2 {
		if k := program[i] % agreeKinds; program[i+1]&8 != 0 && (k == 0 || k == 2 || k == 5) {
			skipUsed = true
		}
	}
	wbuf := pinnedBytes(t, "data")
	rbufs := make([][]byte, agreeOpsMax)
	n := 0
	for i := 0; i+1 < len(program) && n < agreeOpsMax; i += 2 {
		kind, fl := program[i]%agreeKinds, program[i+1]
		sqe := r.GetSQE()
		rbufs[n] = make([]byte, 16)
		switch kind {
		case 0:
			sqe.PrepNop()
		case 1:
			sqe.PrepWrite(fd, wbuf, uint64(fl>>4)*256)
		case 2:
			sqe.PrepWrite(-1, wbuf, 0) // EBADF
		case 3:
			sqe.PrepRead(fd, rbufs[n], 4096+uint64(fl>>4)*8) // full read
		case 4:
			sqe.PrepRead(fd, rbufs[n], agreeFileSize-8) // short read: breaks a link
		case 5:
			sqe.PrepFsync(fd, fl&0x10 != 0)
		case 6:
			sqe.PrepLinkTimeout(agreeTimeout, 0) // never fires: the guarded op is a file op
		}
		if fl&1 != 0 {
			sqe.Flags |= SQEIOLink
		}
		if fl&2 != 0 {
			sqe.Flags |= SQEIOHardlink
		}
		if fl&4 != 0 && !skipUsed { // DRAIN after CQE_SKIP_SUCCESS is -EOPNOTSUPP in the kernel
			sqe.Flags |= SQEIODrain
		}
		// CQE_SKIP_SUCCESS only where success leaves nothing to wait for: a skipped write
		// may still be running in io-wq when the ring closes.
		if fl&8 != 0 && (kind == 0 || kind == 2 || kind == 5) {
			sqe.Flags |= SQECQESkipSuccess
		}
		n++
		sqe.UserData = uint64(n)
	}
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	got := agreeResult{}
	buf := make([]CQE, 128)
	deadline := time.Now().Add(30 * time.Second) // a journal commit under shared-disk load can stall writes for seconds
	for idle := 0; idle < 2 && time.Now().Before(deadline); {
		waiting := len(got) < expect
		if _, err := r.SubmitAndWait(1, 2*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		k := r.PeekCQEs(buf)
		for _, c := range buf[:k] {
			if _, dup := got[c.UserData]; dup {
				t.Fatalf("%s: duplicate CQE for op %d", backend, c.UserData)
			}
			got[c.UserData] = c.Res
		}
		if k == 0 && !waiting {
			idle++
		}
	}
	return got
}

func describe(program []byte) string {
	var b bytes.Buffer
	names := []string{"nop", "write", "write(-1)", "read", "shortread", "fsync", "linktimeout"}
	for i := 0; i+1 < len(program) && i/2 < agreeOpsMax; i += 2 {
		fmt.Fprintf(&b, "%d:%s", i/2+1, names[program[i]%agreeKinds])
		for bit, name := range []string{"link", "hard", "drain", "skip"} {
			if program[i+1]&(1<<bit) != 0 {
				b.WriteString("+" + name)
			}
		}
		b.WriteString(" ")
	}
	return b.String()
}

func FuzzBackendsAgree(f *testing.F) {
	if why := uringUnavailable(); why != "" {
		f.Skipf("io_uring unavailable: %s", why)
	}
	f.Add([]byte{1, 1, 5, 0})                   // write -> fsync
	f.Add([]byte{2, 1, 1, 1, 0, 0})             // failed head cancels the chain
	f.Add([]byte{2, 2, 1, 0})                   // hardlink survives a failure
	f.Add([]byte{4, 1, 0, 0, 3, 8, 3, 9, 0, 0}) // short read breaks a link; skip on success
	f.Add([]byte{1, 4, 3, 4, 0, 5, 0, 0})       // drains
	f.Fuzz(func(t *testing.T, program []byte) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		dir := t.TempDir()
		// The syscall backend completes file ops synchronously, so its count tells how many
		// CQEs to wait for from io_uring (quietly cancelled chains post none).
		got := runAgreeBatch(t, "syscall", dir, program, 0)
		want := runAgreeBatch(t, "uring", dir, program, len(got))
		if fmt.Sprint(sorted(want)) != fmt.Sprint(sorted(got)) {
			t.Fatalf("backends disagree on %s\n io_uring: %v\n syscall:  %v", describe(program), sorted(want), sorted(got))
		}
		a, _ := os.ReadFile(filepath.Join(dir, "uring"))
		b, _ := os.ReadFile(filepath.Join(dir, "syscall"))
		if !bytes.Equal(a, b) {
			t.Fatalf("files differ after %s", describe(program))
		}
	})
}

func sorted(m agreeResult) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, fmt.Sprintf("%02d=%d", k, v))
	}
	sort.Strings(out)
	return out
}
