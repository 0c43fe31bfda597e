package isr_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/replication/isr"
	"github.com/ringlog/ringlog/ring"
)

// TestCheckpointPowerLoss fails the power at every fsync of a checkpoint replacement (and
// right after it returned), several random crashes each, with engine/faultio's CrashFS
// (unsynced writes and directory entries may be lost or torn): the file read back is always
// the old checkpoint or the new one, and the new one once WriteCheckpointFS returned nil.
func TestCheckpointPowerLoss(t *testing.T) {
	const seedsPerPoint = 8
	old := []isr.EpochEntry{{Epoch: 0, StartOffset: 0}, {Epoch: 2, StartOffset: 150}}
	next := []isr.EpochEntry{{Epoch: 0, StartOffset: 0}, {Epoch: 2, StartOffset: 150}, {Epoch: 5, StartOffset: 9001}}
	setup := func(dir string) {
		if err := isr.WriteCheckpoint(filepath.Join(dir, "leader-epoch-checkpoint"), old); err != nil {
			t.Fatal(err)
		}
	}
	write := func(dir string, fs isr.FileSyncer) error {
		return isr.WriteCheckpointFS(fs, filepath.Join(dir, "leader-epoch-checkpoint"), next)
	}
	counter := faultio.NewCrashFS(ring.Syscalls{})
	dir := filepath.Join(t.TempDir(), "p")
	os.Mkdir(dir, 0o755)
	setup(dir)
	if err := write(dir, counter); err != nil {
		t.Fatal(err)
	}
	total := counter.Syncs()
	if total != 2 {
		t.Fatalf("%d fsyncs, want 2 (file, directory)", total)
	}
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 12))
	seen := map[string]int{}
	for at := 1; at <= total+1; at++ {
		for range seedsPerPoint {
			root := t.TempDir()
			dir := filepath.Join(root, "p")
			os.Mkdir(dir, 0o755)
			setup(dir)
			fs := faultio.NewCrashFS(ring.Syscalls{})
			if err := fs.TrackDir(dir); err != nil {
				t.Fatal(err)
			}
			fs.CrashAtSync, fs.CrashRand, fs.CrashImage = at, rng, filepath.Join(root, "image")
			err := write(dir, fs)
			if at > total {
				if err != nil {
					t.Fatal(err)
				}
				fd, _ := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				if ferr := fs.Fsync(fd); !errors.Is(ferr, faultio.ErrCrashed) { // the power loss
					t.Fatalf("power loss after the write: %v", ferr)
				}
				unix.Close(fd)
			}
			got, rerr := isr.ReadCheckpoint(filepath.Join(fs.CrashImage, "leader-epoch-checkpoint"))
			switch {
			case rerr != nil:
				t.Fatalf("crash at fsync %d: %v", at, rerr)
			case slices.Equal(got, next):
				seen["new"]++
			case slices.Equal(got, old) && err != nil:
				seen["old"]++
			default:
				t.Fatalf("crash at fsync %d (write error %v): read %v", at, err, got)
			}
		}
	}
	if seen["new"] == 0 || seen["old"] == 0 {
		t.Errorf("outcomes %v: want both the old and the new checkpoint among the crashes", seen)
	}
}
