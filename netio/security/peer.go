package security

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/ringlog/ringlog/netio/security/scram"
)

// PeerCredentials is the SCRAM login a broker uses on the connections it opens to the
// other brokers of its cluster (replica fetches, controller commands). Its String never
// shows the password.
type PeerCredentials struct {
	Mechanism string // scram.SHA512.Name or scram.SHA256.Name
	User      string
	Password  string
}

// String names the user and mechanism only.
func (c PeerCredentials) String() string { return fmt.Sprintf("%s (%s)", c.User, c.Mechanism) }

// LogValue keeps the password out of structured logs too.
func (c PeerCredentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

// PeerCredentialsFile is a broker's inter-broker login read from a file (0600 advised):
// the first line is the user name, the second the password; nothing else is read, and
// the password never reaches a flag, the environment or a log. Reload re-reads it (SIGHUP).
type PeerCredentialsFile struct {
	path      string
	mechanism string
	current   atomic.Pointer[PeerCredentials]
}

// peerCredentialsFileBytesMax bounds the file: a name (128 bytes) and a password.
const peerCredentialsFileBytesMax = 64 << 10

// OpenPeerCredentials reads path; mechanism empty means SCRAM-SHA-512.
func OpenPeerCredentials(path, mechanism string) (*PeerCredentialsFile, error) {
	if mechanism == "" {
		mechanism = scram.SHA512.Name
	}
	if scram.ByName(mechanism) == nil {
		return nil, fmt.Errorf("inter-broker credentials: mechanism %q: want one of %v", mechanism, scram.Names())
	}
	f := &PeerCredentialsFile{path: path, mechanism: mechanism}
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Reload reads the file again; on error the running credentials stay and the error names
// the file, never its contents.
func (f *PeerCredentialsFile) Reload() error {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("inter-broker credentials: %w", err)
	}
	if len(data) > peerCredentialsFileBytesMax {
		return fmt.Errorf("inter-broker credentials: %s is larger than %d bytes", f.path, peerCredentialsFileBytesMax)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, peerCredentialsFileBytesMax)
	var lines []string
	for len(lines) < 2 && sc.Scan() {
		lines = append(lines, string(bytes.TrimRight(sc.Bytes(), "\r")))
	}
	if len(lines) < 2 || lines[1] == "" {
		return fmt.Errorf("inter-broker credentials: %s: %w", f.path, errPeerCredentialsFormat)
	}
	if err := ValidUserName(lines[0]); err != nil {
		return fmt.Errorf("inter-broker credentials: %s: %w", f.path, err)
	}
	f.current.Store(&PeerCredentials{Mechanism: f.mechanism, User: lines[0], Password: lines[1]})
	return nil
}

var errPeerCredentialsFormat = errors.New("want the user name on the first line and the password on the second")

// Current returns the credentials most recently loaded.
func (f *PeerCredentialsFile) Current() PeerCredentials { return *f.current.Load() }
