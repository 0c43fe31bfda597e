package bench

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoListener means no local process listens on the address.
var ErrNoListener = errors.New("no local listener")

// procScanEntriesMax bounds the /proc walk.
const procScanEntriesMax = 1 << 16

// PIDListeningOn finds the local process with a TCP socket listening on address (host:port),
// from /proc/net/tcp{,6} and /proc/PID/fd, so a run can sample the broker's RSS without being
// told its PID. It needs permission to read other processes' fd tables (same user or root).
func PIDListeningOn(address string) (int, error) {
	_, portText, err := net.SplitHostPort(address)
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", address, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("pid of %s: port: %w", address, err)
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, inode := range listeningInodes(string(data), uint16(port)) {
			inodes[inode] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("pid of %s: %w", address, ErrNoListener)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", address, err)
	}
	for i, entry := range entries {
		if i >= procScanEntriesMax {
			break
		}
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", entry.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("pid of %s: socket owner not visible: %w", address, ErrNoListener)
}

// listeningInodes parses a /proc/net/tcp table and returns the inodes of sockets in LISTEN
// state (0A) on port.
func listeningInodes(table string, port uint16) []string {
	var inodes []string
	for i, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		if i == 0 || len(fields) < 10 {
			continue
		}
		_, localPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(localPort, 16, 16)
		if err != nil || uint16(p) != port || fields[3] != "0A" {
			continue
		}
		inodes = append(inodes, fields[9])
	}
	return inodes
}
