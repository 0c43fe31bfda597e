package tuning

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// ErrBadMountinfo reports a /proc/self/mountinfo that does not parse.
var ErrBadMountinfo = errors.New("malformed mountinfo")

const (
	mountinfoPath = "/proc/self/mountinfo"
	// mountinfoLinesMax bounds the mounts accepted: a container host has a few thousand.
	mountinfoLinesMax = 1 << 16
	// mountinfoLineBytesMax bounds one line: two escaped paths of PATH_MAX (4096 bytes, up
	// to 4 bytes each escaped) plus options fit well inside 64 KiB.
	mountinfoLineBytesMax = 64 << 10
	// mountOptionsMax bounds the options of one mount.
	mountOptionsMax = 256
)

// Mount is one line of mountinfo: a file system mounted from a block device.
type Mount struct {
	// Dev is the device number ("254:0", field 3), the st_dev of files on the mount.
	Dev        string `json:"dev"`
	MountPoint string `json:"mount_point"`
	FSType     string `json:"fs_type"`
	Source     string `json:"source"`
	// Options are the per-mount options (field 6), SuperOptions the file system's (last field).
	Options      []string `json:"options"`
	SuperOptions []string `json:"super_options"`
	// Journal is, for ext4, "yes" or "no" from /sys/fs/ext4/NAME/journal_task ("<none>"
	// without a journal); empty when the kernel does not say.
	Journal string `json:"journal,omitempty"`

	line string // the line as read, for a snapshot
}

// HasOption reports whether name is among the per-mount or the super options.
func (m Mount) HasOption(name string) bool {
	for _, options := range [][]string{m.Options, m.SuperOptions} {
		for _, option := range options {
			if option == name {
				return true
			}
		}
	}
	return false
}

// ParseMountinfo parses the text of /proc/PID/mountinfo:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)       (7)  (8)  (9)     (10)       (11)
//
// Optional fields (7) end at the "-" separator. Mount points and sources have space, tab,
// newline and backslash escaped as \ooo octal; they are unescaped.
func ParseMountinfo(text string) ([]Mount, error) {
	if len(text) > fileBytesMax {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadMountinfo, len(text))
	}
	if n := strings.Count(text, "\n"); n > mountinfoLinesMax {
		return nil, fmt.Errorf("%w: %d lines, more than %d", ErrBadMountinfo, n, mountinfoLinesMax)
	}
	var mounts []Mount
	for number, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		if len(line) > mountinfoLineBytesMax {
			return nil, fmt.Errorf("%w: line %d: %d bytes, more than %d", ErrBadMountinfo, number+1, len(line), mountinfoLineBytesMax)
		}
		mount, err := parseMountLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d %q: %v", ErrBadMountinfo, number+1, clip(line), err)
		}
		mounts = append(mounts, mount)
	}
	return mounts, nil
}

func parseMountLine(line string) (Mount, error) {
	fields := strings.Split(line, " ")
	separator := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			separator = i
			break
		}
	}
	if separator < 0 || len(fields) != separator+4 {
		return Mount{}, errors.New("want 6 fields, optional fields, -, type, source, super options")
	}
	for _, id := range fields[:2] {
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			return Mount{}, fmt.Errorf("mount id %q is not a number", clip(id))
		}
	}
	dev, err := parseDevNumber(fields[2])
	if err != nil {
		return Mount{}, err
	}
	mount := Mount{Dev: dev, FSType: fields[separator+1], line: line}
	if mount.MountPoint, err = unescapeMountField(fields[4]); err != nil {
		return Mount{}, fmt.Errorf("mount point: %w", err)
	}
	if mount.Source, err = unescapeMountField(fields[separator+2]); err != nil {
		return Mount{}, fmt.Errorf("source: %w", err)
	}
	if !strings.HasPrefix(mount.MountPoint, "/") || mount.FSType == "" {
		return Mount{}, errors.New("mount point not absolute or file system type empty")
	}
	if mount.Options, err = splitMountOptions(fields[5]); err != nil {
		return Mount{}, err
	}
	if mount.SuperOptions, err = splitMountOptions(fields[separator+3]); err != nil {
		return Mount{}, err
	}
	return mount, nil
}

// parseDevNumber checks "major:minor" and returns it in canonical form ("254:0"), as
// PlanOptions.DataDevice is written.
func parseDevNumber(text string) (string, error) {
	majorText, minorText, ok := strings.Cut(text, ":")
	major, err1 := strconv.ParseUint(majorText, 10, 32)
	minor, err2 := strconv.ParseUint(minorText, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return "", fmt.Errorf("device %q is not major:minor", clip(text))
	}
	return fmt.Sprintf("%d:%d", major, minor), nil
}

func splitMountOptions(text string) ([]string, error) {
	if n := strings.Count(text, ","); n >= mountOptionsMax {
		return nil, fmt.Errorf("%d options, more than %d", n+1, mountOptionsMax)
	}
	return strings.Split(text, ","), nil
}

// unescapeMountField undoes the kernel's \ooo escapes (space, tab, newline, backslash).
func unescapeMountField(text string) (string, error) {
	if !strings.Contains(text, `\`) {
		return text, nil
	}
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			b.WriteByte(text[i])
			continue
		}
		if i+4 > len(text) {
			return "", fmt.Errorf("escape at the end of %q", clip(text))
		}
		value, err := strconv.ParseUint(text[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape in %q", clip(text))
		}
		b.WriteByte(byte(value))
		i += 3
	}
	return b.String(), nil
}

// mounts reads the mount table and keeps the mounts backed by a device with a non-zero major
// number (a block device; proc, sysfs, tmpfs, overlay and btrfs subvolumes have major 0).
// Only those lines are copied into a snapshot. An absent mountinfo leaves Mounts empty.
func (d *discoverer) mounts() error {
	real, err := d.r.resolve(mountinfoPath)
	if err != nil {
		return err
	}
	data, err := d.r.fsys.ReadFile(real)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", mountinfoPath, err)
	}
	all, err := ParseMountinfo(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", mountinfoPath, err)
	}
	var kept strings.Builder
	journals := map[string]string{}
	for _, mount := range all {
		if strings.HasPrefix(mount.Dev, "0:") {
			continue
		}
		kept.WriteString(mount.line + "\n")
		if mount.FSType == "ext4" {
			journal, seen := journals[mount.Dev]
			if !seen {
				if journal, err = d.ext4Journal(mount.Dev); err != nil {
					return err
				}
				journals[mount.Dev] = journal
			}
			mount.Journal = journal
		}
		d.topo.Mounts = append(d.topo.Mounts, mount)
	}
	d.r.rec.file(mountinfoPath, []byte(kept.String()))
	return nil
}

// ext4Journal says whether the ext4 file system on dev has a journal: "yes", "no", or "" when
// the kernel does not say (no /sys/fs/ext4/NAME/journal_task before Linux 5.x). NAME is the
// kernel's name of the device, the last element of the /sys/dev/block/MAJ:MIN link.
func (d *discoverer) ext4Journal(dev string) (string, error) {
	device, err := d.r.resolveLinks("/sys/dev/block/" + dev)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	task, ok, err := d.r.readOptional("/sys/fs/ext4/" + path.Base(device) + "/journal_task")
	if err != nil || !ok {
		return "", err
	}
	if task == "<none>" {
		return "no", nil
	}
	if _, err := strconv.Atoi(task); err == nil {
		return "yes", nil
	}
	return "", nil
}
