package tuning

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var (
	// ErrNeedRoot reports an apply against the live /sys and /proc by a non-root user.
	ErrNeedRoot = errors.New("apply needs root")
	// ErrNothingApplied reports a failure before the first write: the host is unchanged.
	ErrNothingApplied = errors.New("nothing was changed")
	// ErrPartiallyApplied reports a failed write after others succeeded; the error says
	// what the in-process rollback did, and the revert script is on disk.
	ErrPartiallyApplied = errors.New("apply failed part way")
)

// originalBytesMax bounds a file's original content kept for revert. Tunables are one line.
const originalBytesMax = 64 << 10

// ApplyOptions configure Apply.
type ApplyOptions struct {
	Roots Roots
	// Yes makes Apply write; without it Apply only reports what it would change.
	Yes bool
	// RevertScript is where the revert script goes (required with Yes). It must not exist.
	RevertScript string
	// Geteuid defaults to os.Geteuid.
	Geteuid func() int
	// Now stamps the revert script; defaults to time.Now.
	Now func() time.Time
	// writeFile is a test hook for fault injection; nil writes with writeTunable.
	writeFile func(real string, data []byte) error
}

// Change is one write Apply makes (or would make), with what it needs to undo it.
type Change struct {
	Item     Item   `json:"item"`
	RealPath string `json:"real_path"`
	// Original is the file's content before the change, byte for byte.
	Original []byte `json:"-"`
	// FallbackPath/FallbackValue restore the original state on kernel files that refuse
	// their own read-back form: choice files ("none [mq-deadline]" → "mq-deadline") and
	// vm.dirty_*bytes = 0 (restored by writing the matching *_ratio).
	FallbackPath  string `json:"fallback_path,omitempty"`
	FallbackValue []byte `json:"-"`
}

// ApplyResult reports what Apply did.
type ApplyResult struct {
	Changes []Change
	// Unchanged are items planned as set that already hold the proposed value.
	Unchanged    []Item
	RevertScript string
	Applied      bool
	// Mismatches lists targets that, read back after a successful write, hold something
	// other than the proposed value (the kernel clamped or ignored it).
	Mismatches []string
}

// Apply writes the plan's set items. Without opts.Yes it is a dry run. With it, Apply first
// reads every target (any failure: nothing written), then writes and syncs a revert script
// that restores every original byte for byte, and only then writes the changes in plan
// order. If a write fails, the writes already made are rolled back in reverse order and the
// revert script is kept.
func Apply(plan *Plan, opts ApplyOptions) (*ApplyResult, error) {
	if err := plan.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNothingApplied, err)
	}
	if opts.Roots == (Roots{}) {
		opts.Roots = DefaultRoots()
	}
	result := &ApplyResult{}
	for _, item := range plan.Changes() {
		change, unchanged, err := prepareChange(opts.Roots, item)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNothingApplied, err)
		}
		if unchanged {
			result.Unchanged = append(result.Unchanged, item)
			continue
		}
		result.Changes = append(result.Changes, change)
	}
	if !opts.Yes || len(result.Changes) == 0 {
		return result, nil
	}
	geteuid := opts.Geteuid
	if geteuid == nil {
		geteuid = os.Geteuid
	}
	if opts.Roots.Live() && geteuid() != 0 {
		return nil, fmt.Errorf("%w: it writes /proc/irq, /proc/sys and /sys; run it as root (sudo ringlog tune apply --yes); nothing was changed", ErrNeedRoot)
	}
	if opts.RevertScript == "" {
		return nil, fmt.Errorf("%w: no revert script path", ErrNothingApplied)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	if err := writeRevertScript(opts.RevertScript, result.Changes, now()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNothingApplied, err)
	}
	result.RevertScript = opts.RevertScript
	write := opts.writeFile
	if write == nil {
		write = writeTunable
	}
	for i, change := range result.Changes {
		if err := write(change.RealPath, []byte(change.Item.Proposed+"\n")); err != nil {
			rollback := rollBack(result.Changes[:i], write)
			return result, fmt.Errorf("%w: write %s = %q: %w; %s; revert script kept at %s",
				ErrPartiallyApplied, change.Item.Path, change.Item.Proposed, err, rollback, opts.RevertScript)
		}
	}
	result.Applied = true
	result.Mismatches = readBack(result.Changes)
	return result, nil
}

// readBack re-reads every written target: a write the kernel accepted can still be clamped
// (nr_requests above the tag depth) or ignored.
func readBack(changes []Change) []string {
	var mismatches []string
	for _, change := range changes {
		data, err := os.ReadFile(change.RealPath)
		if err != nil {
			mismatches = append(mismatches, fmt.Sprintf("%s: read back: %v", change.Item.Path, err))
			continue
		}
		if got := normalizeValue(change.Item, data); got != change.Item.Proposed {
			mismatches = append(mismatches, fmt.Sprintf("%s: wrote %q, reads back %q", change.Item.Path, change.Item.Proposed, got))
		}
	}
	return mismatches
}

func prepareChange(roots Roots, item Item) (Change, bool, error) {
	real, err := roots.Resolve(item.Path)
	if err != nil {
		return Change{}, false, err
	}
	original, err := readOriginal(real, item.Path)
	if err != nil {
		return Change{}, false, err
	}
	if normalizeValue(item, original) == item.Proposed {
		return Change{}, true, nil
	}
	change := Change{Item: item, RealPath: real, Original: original}
	switch {
	case bytes.ContainsRune(original, '['):
		selected, _ := parseChoices(string(original))
		if selected == "" {
			return Change{}, false, fmt.Errorf("%s: %q has no [selected] choice", item.Path, clip(string(original)))
		}
		change.FallbackPath, change.FallbackValue = real, []byte(selected+"\n")
	case strings.TrimSpace(string(original)) == "0" &&
		(item.Path == "/proc/sys/vm/dirty_bytes" || item.Path == "/proc/sys/vm/dirty_background_bytes"):
		// The kernel refuses dirty_*bytes = 0; writing the ratio is how it goes back to 0.
		ratioLogical := strings.TrimSuffix(item.Path, "bytes") + "ratio"
		ratioReal, err := roots.Resolve(ratioLogical)
		if err != nil {
			return Change{}, false, err
		}
		if change.FallbackValue, err = readOriginal(ratioReal, ratioLogical); err != nil {
			return Change{}, false, err
		}
		change.FallbackPath = ratioReal
	}
	return change, false, nil
}

func readOriginal(real, logical string) ([]byte, error) {
	data, err := os.ReadFile(real)
	if err != nil {
		return nil, fmt.Errorf("read %s before changing it: %w", logical, err)
	}
	if len(data) > originalBytesMax || bytes.IndexByte(data, 0) >= 0 {
		return nil, fmt.Errorf("read %s: %d bytes or NUL bytes; not a tunable", logical, len(data))
	}
	return data, nil
}

// normalizeValue renders a file's content in the form plan items use for Current.
func normalizeValue(item Item, content []byte) string {
	text := strings.TrimSpace(string(content))
	switch item.Kind {
	case "rps", "xps":
		if cpus, err := ParseCPUMask(text); err == nil {
			return FormatCPUMask(cpus)
		}
	case "irq":
		if cpus, err := ParseCPUList(text); err == nil {
			return FormatCPUList(cpus)
		}
	}
	if strings.Contains(text, "[") {
		selected, _ := parseChoices(text)
		return selected
	}
	return strings.Join(strings.Fields(text), " ")
}

// writeTunable writes a value in one write(2), as sysfs and procfs expect.
func writeTunable(real string, data []byte) error {
	f, err := os.OpenFile(real, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func rollBack(done []Change, write func(string, []byte) error) string {
	var failures []string
	for i := len(done) - 1; i >= 0; i-- {
		change := done[i]
		err := write(change.RealPath, change.Original)
		if err != nil && change.FallbackPath != "" {
			err = write(change.FallbackPath, change.FallbackValue)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", change.Item.Path, err))
		}
	}
	if len(failures) > 0 {
		return fmt.Sprintf("rolled back %d of %d earlier changes, failed: %s", len(done)-len(failures), len(done), strings.Join(failures, "; "))
	}
	return fmt.Sprintf("rolled back all %d earlier changes", len(done))
}

// shellQuote quotes s for sh: inside single quotes every byte is literal, newlines included.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// commentSafe keeps plan text (which may come from a hand-edited plan file) from ending a
// shell comment: control characters become '?'.
func commentSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// RevertScriptText renders the script that undoes changes, newest first.
func RevertScriptText(changes []Change, at time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, `#!/bin/sh
# ringlog tune revert script, written %s before applying %d changes.
# Run it as root: sh %s
# Each step writes back the exact bytes read before the change. Kernel files that refuse their
# own read-back form (I/O scheduler and THP choice lists, vm.dirty_*bytes = 0) then get the
# equivalent write after "||".
set -u
status=0
put() { printf '%%s' "$2" > "$1"; }
fail() { echo "revert: could not restore $1" >&2; status=1; }
`, at.UTC().Format(time.RFC3339), len(changes), "THIS_FILE")
	for i := len(changes) - 1; i >= 0; i-- {
		change := changes[i]
		fmt.Fprintf(&b, "\n# %s: %s -> %s\n", commentSafe(change.Item.Target), commentSafe(change.Item.Current), commentSafe(change.Item.Proposed))
		path := shellQuote(change.RealPath)
		if change.FallbackPath != "" {
			fmt.Fprintf(&b, "put %s %s 2>/dev/null || put %s %s || fail %s\n", path, shellQuote(string(change.Original)),
				shellQuote(change.FallbackPath), shellQuote(string(change.FallbackValue)), path)
		} else {
			fmt.Fprintf(&b, "put %s %s || fail %s\n", path, shellQuote(string(change.Original)), path)
		}
	}
	b.WriteString("exit $status\n")
	return b.String()
}

func writeRevertScript(path string, changes []Change, at time.Time) error {
	text := strings.Replace(RevertScriptText(changes, at), "THIS_FILE", path, 1)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return fmt.Errorf("create revert script: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("write revert script %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync revert script %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close revert script %s: %w", path, err)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync revert script directory: %w", err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("sync revert script directory: %w", err)
	}
	return nil
}
