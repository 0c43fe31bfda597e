package faultio

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Limits of the namespace model (tests only).
const (
	trackedDirsMax  = 1 << 14 // directories snapshotted over one CrashFS's life
	crashDepthMax   = 32      // directory nesting below the root that Crash walks
	movedNamePrefix = ".crashfs-moved-"
)

// TrackDir turns on the directory-entry model for root and everything below it, declaring
// the tree as it is now durable (as after sync(2)). From then on, a directory's listing is
// durable as of its last fsync through this FileIO; Crash takes back the rest. The shadow
// directory that holds the hard links is created beside root (same file system) and
// removed by Crash. Call once, before the work to be crashed.
func (c *CrashFS) TrackDir(root string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.root != "" {
		return fmt.Errorf("faultio: TrackDir %s: already tracking %s", root, c.root)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("faultio: TrackDir: %w", err)
	}
	abs, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("faultio: TrackDir: %w", err)
	}
	shadow, err := os.MkdirTemp(filepath.Dir(abs), ".crashfs-shadow-")
	if err != nil {
		return fmt.Errorf("faultio: TrackDir: %w", err)
	}
	c.root, c.shadow = abs, shadow
	c.durable, c.dirFds = map[fileKey]dirListing{}, map[fileKey]int{}
	c.linked, c.made = map[fileKey]bool{}, map[fileKey]bool{}
	return filepath.WalkDir(abs, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return fmt.Errorf("faultio: TrackDir: stat %s: %w", path, err)
		}
		return c.snapshot(path, statKey(&st))
	})
}

// within reports whether path is root or below it.
func within(root, path string) bool {
	return path == root || strings.HasPrefix(path, root+string(filepath.Separator))
}

// snapshotTries bounds how often snapshot lists a directory again because an entry it
// listed was renamed or removed before it could be linked.
const snapshotTries = 64

// snapshot records dir's current listing as durable and links its files into the shadow.
// Work off the test's goroutine (a log's recycle-pool preparation, say) may rename or remove
// an entry between the listing and its link, as it may during a real directory fsync; the
// listing is then taken again, so what is recorded is the directory as it was at one moment
// during the sync, never a name without its file.
func (c *CrashFS) snapshot(dir string, k fileKey) error {
	for try := 1; ; try++ {
		listing, err := readListing(dir)
		if err != nil {
			return err
		}
		err = c.snapshotListing(dir, k, listing)
		if !errors.Is(err, os.ErrNotExist) || try == snapshotTries {
			return err
		}
	}
}

// snapshotListing records listing, read from dir, as durable after linking its files into
// the shadow; it fails with an os.ErrNotExist error if an entry is gone.
func (c *CrashFS) snapshotListing(dir string, k fileKey, listing dirListing) error {
	if _, ok := c.dirFds[k]; !ok {
		if len(c.dirFds) >= trackedDirsMax {
			return fmt.Errorf("faultio: more than %d directories tracked", trackedDirsMax)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("faultio: pin %s: %w", dir, err)
		}
		c.dirFds[k] = fd
	}
	for name, e := range listing {
		if e.isDir || c.linked[e.key] {
			continue
		}
		if err := os.Link(filepath.Join(dir, name), c.shadowPath(e.key)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("faultio: keep %s/%s: %w", dir, name, err)
		}
		c.linked[e.key] = true
	}
	c.durable[k] = listing
	return nil
}

func (c *CrashFS) shadowPath(k fileKey) string {
	return filepath.Join(c.shadow, strconv.FormatUint(k.dev, 10)+"-"+strconv.FormatUint(k.ino, 10))
}

// readListing lists dir's entries with their inodes; shadow and move names are skipped.
func readListing(dir string) (dirListing, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("faultio: list %s: %w", dir, err)
	}
	out := make(dirListing, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), movedNamePrefix) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, e.Name()), &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("faultio: stat %s/%s: %w", dir, e.Name(), err)
		}
		out[e.Name()] = dirEntry{key: statKey(&st), isDir: st.Mode&unix.S_IFMT == unix.S_IFDIR}
	}
	return out, nil
}

// NamespaceStats says how many groups of non-durable directory changes the last Crash kept
// and how many it undid.
func (c *CrashFS) NamespaceStats() (kept, undone int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.kept, c.stats.undone
}

func (c *CrashFS) crashNamespace(rng *rand.Rand) error {
	var rootSt unix.Stat_t
	err := unix.Lstat(c.root, &rootSt)
	if err == nil {
		err = c.restoreDir(c.root, statKey(&rootSt), rng, 0)
	}
	for _, fd := range c.dirFds {
		unix.Close(fd)
	}
	c.dirFds = nil
	return errors.Join(err, os.RemoveAll(c.shadow))
}

// restoreDir brings dir (which stands for the directory inode k) back to k's durable
// listing, keeping or undoing each group of changes, then recurses into its directories.
func (c *CrashFS) restoreDir(dir string, k fileKey, rng *rand.Rand, depth int) error {
	if depth > crashDepthMax {
		return fmt.Errorf("faultio: crash: %s nested deeper than %d", dir, crashDepthMax)
	}
	durable := c.durable[k] // nil: never synced, so its durable listing is empty
	current, err := readListing(dir)
	if err != nil {
		return err
	}
	groups := changeGroups(durable, current)
	for _, g := range groups {
		if rng.IntN(2) == 0 {
			c.stats.kept++
			continue
		}
		c.stats.undone++
		if err := c.undo(dir, g, durable, current); err != nil {
			return err
		}
	}
	// Recurse: each directory now present stands for the inode it had, or for the durable
	// inode it replaced when undo recreated it.
	after, err := readListing(dir)
	if err != nil {
		return err
	}
	names := sortedNames(after)
	for _, name := range names {
		e := after[name]
		if !e.isDir {
			continue
		}
		stands := e.key
		if d, ok := durable[name]; ok && d.isDir && c.made[e.key] {
			stands = d.key
		}
		if err := c.restoreDir(filepath.Join(dir, name), stands, rng, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// changeGroups returns the names whose entry differs between the durable and the current
// listing, grouped so that names sharing an inode (either side) are in one group.
func changeGroups(durable, current dirListing) [][]string {
	var changed []string
	for name, d := range durable {
		if cur, ok := current[name]; !ok || cur != d {
			changed = append(changed, name)
		}
	}
	for name := range current {
		if _, ok := durable[name]; !ok {
			changed = append(changed, name)
		}
	}
	sort.Strings(changed)
	parent := make(map[string]string, len(changed))
	var find func(string) string
	find = func(n string) string {
		for parent[n] != n {
			parent[n] = parent[parent[n]]
			n = parent[n]
		}
		return n
	}
	byInode := map[fileKey]string{}
	for _, n := range changed {
		parent[n] = n
	}
	for _, n := range changed {
		for _, side := range []dirListing{durable, current} {
			e, ok := side[n]
			if !ok {
				continue
			}
			if other, seen := byInode[e.key]; seen {
				parent[find(n)] = find(other)
			} else {
				byInode[e.key] = n
			}
		}
	}
	index := map[string]int{}
	var groups [][]string
	for _, n := range changed {
		r := find(n)
		i, ok := index[r]
		if !ok {
			i = len(groups)
			index[r] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], n)
	}
	return groups
}

// undo puts the names of one group back to their durable entries: current entries are moved
// aside (directories) or unlinked (files), then durable files are linked back from the
// shadow and durable directories renamed back or, when gone, recreated empty.
func (c *CrashFS) undo(dir string, group []string, durable, current dirListing) error {
	moved := map[fileKey]string{}
	for _, name := range group {
		cur, ok := current[name]
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		if cur.isDir {
			aside := filepath.Join(dir, movedNamePrefix+strconv.FormatUint(cur.key.ino, 10))
			if err := os.Rename(path, aside); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // removed meanwhile by a goroutine of the "dead" process
				}
				return fmt.Errorf("faultio: crash: move %s aside: %w", path, err)
			}
			moved[cur.key] = aside
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("faultio: crash: remove %s: %w", path, err)
		}
	}
	for _, name := range group {
		d, ok := durable[name]
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		switch {
		case !d.isDir:
			if err := os.Link(c.shadowPath(d.key), path); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("faultio: crash: restore %s: %w", path, err)
			}
		case moved[d.key] != "":
			if err := os.Rename(moved[d.key], path); err != nil {
				return fmt.Errorf("faultio: crash: restore %s: %w", path, err)
			}
			delete(moved, d.key)
		default:
			if err := os.Mkdir(path, 0o755); err != nil {
				return fmt.Errorf("faultio: crash: recreate %s: %w", path, err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil {
				return fmt.Errorf("faultio: crash: stat %s: %w", path, err)
			}
			c.made[statKey(&st)] = true
		}
	}
	for _, aside := range moved { // directories whose creation is undone
		if err := os.RemoveAll(aside); err != nil {
			return fmt.Errorf("faultio: crash: remove %s: %w", aside, err)
		}
	}
	return nil
}

func sortedNames(l dirListing) []string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// copyTree copies the directories and regular files under src to dst (created; must not
// exist). Other file types are skipped.
func copyTree(src, dst string) error {
	if src == "" || dst == "" {
		return errors.New("faultio: CrashImage needs TrackDir and an image path")
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile by a goroutine of the "dead" process
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(to, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
}
