package ring

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestProbeFileIO(t *testing.T) {
	for _, backend := range []string{"auto", BackendSyscall} {
		for _, direct := range []bool{false, true} {
			dir := t.TempDir()
			p, err := ProbeFileIO(dir, Config{Backend: backend}, direct)
			if direct && errors.Is(err, unix.EINVAL) {
				t.Logf("%s direct: O_DIRECT refused by %s's filesystem", backend, dir)
				continue
			}
			if err != nil {
				t.Fatalf("%s direct=%v: %v", backend, direct, err)
			}
			t.Logf("%s direct=%v: %s", backend, direct, p)
			if p.Writes == 0 || p.WriteBytes != probeBufs*probeBufBytes || p.Inline <= 0 || p.Direct != direct {
				t.Fatalf("probe %+v", p)
			}
			switch p.Backend {
			case BackendUring:
				if p.Ring <= 0 || p.InlineIsFaster != (p.Inline <= p.Ring) {
					t.Fatalf("io_uring probe %+v", p)
				}
			default:
				if p.Ring != 0 || !p.InlineIsFaster {
					t.Fatalf("syscall backend probe must choose inline without timing a ring: %+v", p)
				}
			}
			if !strings.HasPrefix(p.String(), "inline (") && !strings.HasPrefix(p.String(), "ring (") {
				t.Fatalf("String() = %q", p)
			}
			entries, err := os.ReadDir(dir)
			if err != nil || len(entries) != 0 {
				t.Fatalf("scratch file left behind: %v %v", entries, err)
			}
		}
	}
	if _, err := ProbeFileIO("/nonexistent-ringlog-dir", Config{}, false); err == nil {
		t.Fatal("probe in a missing directory succeeded")
	}
}
