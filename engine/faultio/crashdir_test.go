package faultio

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// crashSeeds is how many seeds each namespace test tries; each test checks it saw every
// outcome it allows, so the model can neither always keep nor always undo.
const crashSeeds = 24

func fsyncDir(t *testing.T, c *CrashFS, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := c.Fsync(fd); err != nil {
		t.Fatal(err)
	}
}

// writeSynced creates path with data through c and fsyncs the file (not its directory).
func writeSynced(t *testing.T, c *CrashFS, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.Pwrite(int(f.Fd()), []byte(data), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}

// contents is the file's data, or "<none>" when it does not exist.
func contents(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// crashCase runs setup (before TrackDir: durable), work (after), a Crash, and returns what
// check reports.
func crashCase(t *testing.T, seed uint64, setup, work func(c *CrashFS, root string), check func(root string) string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	c := NewCrashFS(ring.Syscalls{})
	if setup != nil {
		setup(c, root)
	}
	if err := c.TrackDir(root); err != nil {
		t.Fatal(err)
	}
	work(c, root)
	if err := c.Crash(rand.New(rand.NewPCG(seed, 7))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.shadow); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("shadow dir left behind: %v", err)
	}
	return check(root)
}

func TestCrashNamespace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(c *CrashFS, root string)
		work  func(c *CrashFS, root string)
		check func(root string) string
		want  []string // every outcome must be seen, and no other
	}{
		{
			name:  "create without dir sync may vanish",
			work:  func(c *CrashFS, root string) { writeSynced(t, c, filepath.Join(root, "f"), "new") },
			check: func(root string) string { return contents(t, filepath.Join(root, "f")) },
			want:  []string{"new", "<none>"},
		},
		{
			name: "create with dir sync stays",
			work: func(c *CrashFS, root string) {
				writeSynced(t, c, filepath.Join(root, "f"), "new")
				fsyncDir(t, c, root)
			},
			check: func(root string) string { return contents(t, filepath.Join(root, "f")) },
			want:  []string{"new"},
		},
		{
			name:  "replace by rename is old or new, never missing",
			setup: func(c *CrashFS, root string) { writeSynced(t, c, filepath.Join(root, "f"), "old") },
			work: func(c *CrashFS, root string) {
				writeSynced(t, c, filepath.Join(root, "f.tmp"), "new")
				if err := os.Rename(filepath.Join(root, "f.tmp"), filepath.Join(root, "f")); err != nil {
					t.Fatal(err)
				}
			},
			check: func(root string) string {
				return contents(t, filepath.Join(root, "f")) + "," + contents(t, filepath.Join(root, "f.tmp"))
			},
			want: []string{"old,<none>", "new,<none>"},
		},
		{
			name:  "rename is atomic",
			setup: func(c *CrashFS, root string) { writeSynced(t, c, filepath.Join(root, "a"), "x") },
			work: func(c *CrashFS, root string) {
				if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "b")); err != nil {
					t.Fatal(err)
				}
			},
			check: func(root string) string {
				return contents(t, filepath.Join(root, "a")) + "," + contents(t, filepath.Join(root, "b"))
			},
			want: []string{"x,<none>", "<none>,x"},
		},
		{
			name:  "unlink without dir sync may come back",
			setup: func(c *CrashFS, root string) { writeSynced(t, c, filepath.Join(root, "f"), "kept") },
			work: func(c *CrashFS, root string) {
				if err := os.Remove(filepath.Join(root, "f")); err != nil {
					t.Fatal(err)
				}
			},
			check: func(root string) string { return contents(t, filepath.Join(root, "f")) },
			want:  []string{"kept", "<none>"},
		},
		{
			name:  "unlink with dir sync is final",
			setup: func(c *CrashFS, root string) { writeSynced(t, c, filepath.Join(root, "f"), "kept") },
			work: func(c *CrashFS, root string) {
				if err := os.Remove(filepath.Join(root, "f")); err != nil {
					t.Fatal(err)
				}
				fsyncDir(t, c, root)
			},
			check: func(root string) string { return contents(t, filepath.Join(root, "f")) },
			want:  []string{"<none>"},
		},
		{
			name: "new subdirectory: synced inside, not in its parent",
			work: func(c *CrashFS, root string) {
				sub := filepath.Join(root, "sub")
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				writeSynced(t, c, filepath.Join(sub, "f"), "data")
				fsyncDir(t, c, sub)
			},
			check: func(root string) string { return contents(t, filepath.Join(root, "sub", "f")) },
			want:  []string{"data", "<none>"},
		},
		{
			name: "new subdirectory: in its parent, contents not synced",
			work: func(c *CrashFS, root string) {
				sub := filepath.Join(root, "sub")
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				fsyncDir(t, c, root)
				writeSynced(t, c, filepath.Join(sub, "f"), "data")
			},
			check: func(root string) string {
				if _, err := os.Stat(filepath.Join(root, "sub")); err != nil {
					t.Fatalf("synced subdirectory lost: %v", err)
				}
				return contents(t, filepath.Join(root, "sub", "f"))
			},
			want: []string{"data", "<none>"},
		},
		{
			name: "removed directory may come back whole",
			setup: func(c *CrashFS, root string) {
				sub := filepath.Join(root, "sub")
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				writeSynced(t, c, filepath.Join(sub, "f"), "data")
			},
			work: func(c *CrashFS, root string) {
				if err := os.RemoveAll(filepath.Join(root, "sub")); err != nil {
					t.Fatal(err)
				}
			},
			check: func(root string) string { return contents(t, filepath.Join(root, "sub", "f")) },
			want:  []string{"data", "<none>"},
		},
		{
			name: "renamed directory is undone whole",
			setup: func(c *CrashFS, root string) {
				sub := filepath.Join(root, "sub")
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				writeSynced(t, c, filepath.Join(sub, "f"), "data")
			},
			work: func(c *CrashFS, root string) {
				if err := os.Rename(filepath.Join(root, "sub"), filepath.Join(root, "gone")); err != nil {
					t.Fatal(err)
				}
				fsyncDir(t, c, filepath.Join(root, "gone"))
			},
			check: func(root string) string {
				return contents(t, filepath.Join(root, "sub", "f")) + "," + contents(t, filepath.Join(root, "gone", "f"))
			},
			want: []string{"data,<none>", "<none>,data"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]bool{}
			for seed := uint64(0); seed < crashSeeds; seed++ {
				got := crashCase(t, seed, tc.setup, tc.work, tc.check)
				ok := false
				for _, w := range tc.want {
					ok = ok || got == w
				}
				if !ok {
					t.Fatalf("seed %d: outcome %q, want one of %q", seed, got, tc.want)
				}
				seen[got] = true
			}
			if len(seen) != len(tc.want) {
				t.Fatalf("outcomes %v over %d seeds, want all of %q", seen, crashSeeds, tc.want)
			}
		})
	}
}

// TestCrashFreezes: after Crash, writes and syncs fail, so a process shut down afterwards
// writes nothing through the FileIO.
func TestCrashFreezes(t *testing.T) {
	f, _ := openTemp(t)
	c := NewCrashFS(ring.Syscalls{})
	if err := c.Crash(rand.New(rand.NewPCG(1, 1))); err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	if _, err := c.Pwrite(fd, []byte("x"), 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("pwrite after crash: %v", err)
	}
	if err := c.Fdatasync(fd); !errors.Is(err, ErrCrashed) {
		t.Fatalf("fdatasync after crash: %v", err)
	}
	if err := c.Fsync(fd); !errors.Is(err, ErrCrashed) {
		t.Fatalf("fsync after crash: %v", err)
	}
}

// TestCrashDataOfUnlinkedFile: unsynced writes to a file are undone even when its name is
// gone at the crash, and the restored file carries the undone data.
func TestCrashDataOfUnlinkedFile(t *testing.T) {
	for seed := uint64(0); seed < crashSeeds; seed++ {
		root := filepath.Join(t.TempDir(), "root")
		os.Mkdir(root, 0o755)
		c := NewCrashFS(ring.Syscalls{})
		path := filepath.Join(root, "f")
		writeSynced(t, c, path, "synced")
		if err := c.TrackDir(root); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Pwrite(int(f.Fd()), []byte("+more"), 6); err != nil {
			t.Fatal(err)
		}
		f.Close()
		os.Remove(path)
		if err := c.Crash(rand.New(rand.NewPCG(seed, 9))); err != nil {
			t.Fatal(err)
		}
		got := contents(t, path)
		switch got {
		case "<none>", "synced", "synced+more", "synced+", "synced+m", "synced+mo", "synced+mor":
		default:
			t.Fatalf("seed %d: %q", seed, got)
		}
	}
}

// TestCrashDirSyncBesideRenames: a directory fsync through CrashFS while another goroutine
// creates and renames files in the directory (as a log's recycle-pool preparation does
// beside the log's own syncs) records a listing that existed, and never fails because an
// entry it listed moved before it was linked into the shadow.
func TestCrashDirSyncBesideRenames(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ { // a long listing: a wide window between it and the links
		if err := os.WriteFile(filepath.Join(root, "old-"+strconv.Itoa(i)), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := NewCrashFS(ring.Syscalls{})
	if err := c.TrackDir(root); err != nil {
		t.Fatal(err)
	}
	const renames = 500
	done := make(chan error, 1)
	go func() {
		for i := 0; i < renames; i++ {
			tmp, final := filepath.Join(root, "f.tmp"), filepath.Join(root, "f-"+strconv.Itoa(i%8))
			if err := os.WriteFile(tmp, []byte("new"), 0o644); err != nil {
				done <- err
				return
			}
			if err := os.Rename(tmp, final); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	syncs := 0
	for finished := false; !finished; syncs++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		fsyncDir(t, c, root)
	}
	if err := c.Crash(rand.New(rand.NewPCG(1, 2))); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if got := contents(t, filepath.Join(root, e.Name())); got != "old" && got != "new" {
			t.Fatalf("after %d syncs beside %d renames: %s holds %q", syncs, renames, e.Name(), got)
		}
	}
	t.Logf("%d directory syncs beside %d renames, %d entries after the crash", syncs, renames, len(entries))
}
