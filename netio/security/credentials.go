package security

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/ringlog/ringlog/netio/security/scram"
)

// Credentials are the SCRAM users of a broker, kept in DATA/credentials.json:
//
//	{"format": 1, "users": {"alice": {"SCRAM-SHA-256": {"salt": BASE64, "iterations": 8192,
//	                                   "stored_key": BASE64, "server_key": BASE64}}}}
//
// Only the salt, the iteration count and the two derived keys are stored (never a
// password or a salted password); the file is 0600 and replaced atomically on every
// change. Lookups take a read lock and copy nothing.
type Credentials struct {
	dir     string
	fakeKey []byte // per process: the salts shown for unknown users

	writeMu sync.Mutex // serialises changes with their file writes, in order
	mu      sync.RWMutex
	users   map[string]map[string]scram.Credential // guarded by mu: user -> mechanism -> credential
}

// CredentialsFile is the file's name in the data directory.
const CredentialsFile = "credentials.json"

// Bounds of the credentials file.
const (
	credentialsFileBytesMax = 16 << 20 // ~ 50,000 users with both mechanisms
	usersMax                = 10000
	userNameBytesMax        = 128
)

// ErrInvalidUser refuses a user name outside [A-Za-z0-9._@-]{1,128}.
var ErrInvalidUser = errors.New("user name must be 1-128 characters of [A-Za-z0-9._@-]")

type credentialsFile struct {
	Format int                                `json:"format"`
	Users  map[string]map[string]storedSecret `json:"users"`
}

type storedSecret struct {
	Salt       []byte `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// OpenCredentials loads dir's credentials file (none: no users).
func OpenCredentials(dir string) (*Credentials, error) {
	c := &Credentials{dir: dir, users: map[string]map[string]scram.Credential{}, fakeKey: make([]byte, 32)}
	rand.Read(c.fakeKey)
	data, err := readSmallFile(dir, CredentialsFile, credentialsFileBytesMax)
	if err != nil || data == nil {
		return c, err
	}
	users, err := decodeCredentialsFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CredentialsFile, err)
	}
	c.users = users
	return c, nil
}

// decodeCredentialsFile decodes the credentials file's contents: at most usersMax users
// with valid names, each with valid credentials of known mechanisms.
func decodeCredentialsFile(data []byte) (map[string]map[string]scram.Credential, error) {
	var f credentialsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Format != 1 {
		return nil, fmt.Errorf("format %d, want 1", f.Format)
	}
	if len(f.Users) > usersMax {
		return nil, fmt.Errorf("%d users: the most the broker keeps is %d", len(f.Users), usersMax)
	}
	users := map[string]map[string]scram.Credential{}
	for user, mechs := range f.Users {
		if err := ValidUserName(user); err != nil {
			return nil, fmt.Errorf("user %q: %w", user, err)
		}
		for name, s := range mechs {
			m := scram.ByName(name)
			cred := scram.Credential{Salt: s.Salt, Iterations: s.Iterations, StoredKey: s.StoredKey, ServerKey: s.ServerKey}
			if m == nil || !m.Valid(cred) {
				return nil, fmt.Errorf("user %q: invalid %s credential", user, name)
			}
			if users[user] == nil {
				users[user] = map[string]scram.Credential{}
			}
			users[user][name] = cred
		}
	}
	return users, nil
}

// ValidUserName checks a SCRAM user name.
func ValidUserName(name string) error {
	if name == "" || len(name) > userNameBytesMax {
		return ErrInvalidUser
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '@' || r == '-'
		if !ok {
			return ErrInvalidUser
		}
	}
	return nil
}

// Lookup returns user's credential for m (scram.Lookup).
func (c *Credentials) Lookup(m *scram.Mechanism, user string) (scram.Credential, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	cred, ok := c.users[user][m.Name]
	return cred, ok
}

// Fake returns the credential shown for an unknown user: a salt derived from the user
// name and a per-process key, so asking twice gives the same salt and nothing tells an
// unknown user from a wrong password.
func (c *Credentials) Fake(user string) scram.Credential {
	h := hmac.New(sha256.New, c.fakeKey)
	h.Write([]byte(user))
	return scram.Credential{Salt: h.Sum(nil)[:scram.SaltBytes], Iterations: scram.IterationsDefault}
}

// UserInfo describes one user: the mechanisms it has a credential for, with their
// iteration counts.
type UserInfo struct {
	User       string
	Mechanisms map[string]int
}

// Describe lists the named users that exist (all users for nil), sorted by name.
func (c *Credentials) Describe(users []string) []UserInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if users == nil {
		for u := range c.users {
			users = append(users, u)
		}
	}
	var out []UserInfo
	for _, u := range users {
		mechs, ok := c.users[u]
		if !ok {
			continue
		}
		info := UserInfo{User: u, Mechanisms: map[string]int{}}
		for name, cred := range mechs {
			info.Mechanisms[name] = cred.Iterations
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out
}

// Len is the number of users.
func (c *Credentials) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.users)
}

// Set stores user's credential for m from a salted password (computed by whoever knows
// the password: the CLI, never the broker) and writes the file. It keeps a copy of salt:
// the broker's decoded AlterUsers request holds it in a frame buffer that later requests
// reuse.
func (c *Credentials) Set(user string, m *scram.Mechanism, salt []byte, iterations int, saltedPassword []byte) error {
	if err := ValidUserName(user); err != nil {
		return err
	}
	if err := scram.CheckIterations(iterations); err != nil {
		return err
	}
	if len(salt) < 8 || len(salt) > 64 {
		return fmt.Errorf("salt of %d bytes: want 8-64", len(salt))
	}
	if len(saltedPassword) != m.Size() {
		return fmt.Errorf("salted password of %d bytes, want %d for %s", len(saltedPassword), m.Size(), m.Name)
	}
	cred := m.CredentialFromSalted(saltedPassword, bytes.Clone(salt), iterations)
	return c.change(func(users map[string]map[string]scram.Credential) error {
		if users[user] == nil {
			if len(users) >= usersMax {
				return fmt.Errorf("%d users already: the most the broker keeps", usersMax)
			}
			users[user] = map[string]scram.Credential{}
		}
		users[user][m.Name] = cred
		return nil
	})
}

// ErrNoSuchUser is returned by Delete for a user (or mechanism) that has no credential.
var ErrNoSuchUser = errors.New("no such user")

// Delete removes user's credential for the mechanism named, or all of them for "".
func (c *Credentials) Delete(user, mechanism string) error {
	return c.change(func(users map[string]map[string]scram.Credential) error {
		mechs, ok := users[user]
		if !ok {
			return ErrNoSuchUser
		}
		if mechanism == "" {
			delete(users, user)
			return nil
		}
		if _, ok := mechs[mechanism]; !ok {
			return fmt.Errorf("%w: %s has no %s credential", ErrNoSuchUser, user, mechanism)
		}
		delete(mechs, mechanism)
		if len(mechs) == 0 {
			delete(users, user)
		}
		return nil
	})
}

// change applies fn to a copy of the users, writes the file, then swaps the copy in.
func (c *Credentials) change(fn func(map[string]map[string]scram.Credential) error) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.RLock()
	next := make(map[string]map[string]scram.Credential, len(c.users)+1)
	for u, mechs := range c.users {
		m := make(map[string]scram.Credential, len(mechs))
		for k, v := range mechs {
			m[k] = v
		}
		next[u] = m
	}
	c.mu.RUnlock()
	if err := fn(next); err != nil {
		return err
	}
	f := credentialsFile{Format: 1, Users: map[string]map[string]storedSecret{}}
	for u, mechs := range next {
		f.Users[u] = map[string]storedSecret{}
		for name, cred := range mechs {
			f.Users[u][name] = storedSecret{cred.Salt, cred.Iterations, cred.StoredKey, cred.ServerKey}
		}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(c.dir, CredentialsFile, append(data, '\n')); err != nil {
		return err
	}
	c.mu.Lock()
	c.users = next
	c.mu.Unlock()
	return nil
}
