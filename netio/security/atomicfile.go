package security

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic replaces dir/name with data: written to a temporary file in dir with
// mode 0600, synced, renamed over the old file, and the directory synced, so that a crash
// leaves the old file or the new one, never a mix. Security files hold secrets (salted
// keys) and rules: readable by the broker's user only.
func writeFileAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory of %s: %w", name, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory of %s: %w", name, err)
	}
	return nil
}

// readSmallFile reads dir/name, refusing files over limit bytes; a missing file is
// (nil, nil).
func readSmallFile(dir, name string, limit int64) ([]byte, error) {
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, over the %d-byte limit", path, st.Size(), limit)
	}
	return os.ReadFile(path)
}
