package security_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
)

// TestCredentialsFile: users survive a reopen, the file is 0600 and holds neither the
// password nor the salted password, deletes persist, bad names and bad files are refused.
func TestCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	c, err := security.OpenCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	const password = "hunter2-but-longer"
	salt := scram.NewSalt()
	salted := scram.SHA256.SaltPassword(password, salt, scram.IterationsMin)
	if err := c.Set("alice", scram.SHA256, salt, scram.IterationsMin, salted); err != nil {
		t.Fatal(err)
	}
	if err := c.Set("bob", scram.SHA512, salt, scram.IterationsMin, scram.SHA512.SaltPassword(password, salt, scram.IterationsMin)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, security.CredentialsFile)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v", st, err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), password) || strings.Contains(string(data), string(salted)) {
		t.Fatal("the credentials file holds the password or the salted password")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}

	again, err := security.OpenCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := scram.SHA256.CredentialFromSalted(salted, salt, scram.IterationsMin)
	if got, ok := again.Lookup(scram.SHA256, "alice"); !ok || string(got.StoredKey) != string(want.StoredKey) {
		t.Fatal("alice's credential did not survive a reopen")
	}
	if _, ok := again.Lookup(scram.SHA512, "alice"); ok {
		t.Fatal("alice has a SHA-512 credential she was never given")
	}
	if users := again.Describe(nil); len(users) != 2 || users[0].User != "alice" || users[1].Mechanisms[scram.SHA512.Name] != scram.IterationsMin {
		t.Fatalf("describe: %+v", users)
	}
	if err := again.Delete("alice", ""); err != nil {
		t.Fatal(err)
	}
	if err := again.Delete("alice", ""); !errors.Is(err, security.ErrNoSuchUser) {
		t.Fatalf("second delete: %v", err)
	}
	if third, _ := security.OpenCredentials(dir); third.Len() != 1 {
		t.Fatalf("after delete: %d users", third.Len())
	}

	for _, bad := range []string{"", "a b", "a,b", "a=b", strings.Repeat("x", 129)} {
		if err := c.Set(bad, scram.SHA256, salt, scram.IterationsMin, salted); !errors.Is(err, security.ErrInvalidUser) {
			t.Errorf("user %q: %v", bad, err)
		}
	}
	if err := c.Set("carol", scram.SHA256, salt, 10, salted); err == nil {
		t.Error("10 iterations accepted")
	}
	if err := c.Set("carol", scram.SHA512, salt, scram.IterationsMin, salted); err == nil {
		t.Error("a SHA-256 salted password accepted for SHA-512")
	}
	os.WriteFile(path, []byte(`{"format":1,"users":{"x":{"SCRAM-SHA-256":{"salt":"AA==","iterations":1}}}}`), 0o600)
	if _, err := security.OpenCredentials(dir); err == nil {
		t.Error("a credentials file with a broken entry was loaded")
	}
	// Unknown users get a stable fake salt.
	if f1, f2 := c.Fake("nobody"), c.Fake("nobody"); string(f1.Salt) != string(f2.Salt) || len(f1.Salt) == 0 {
		t.Error("fake salt not stable")
	}
}

// TestCredentialsSetKeepsItsOwnSalt: Set copies the salt; the caller's slice (a frame
// buffer in the broker) may be overwritten afterwards.
func TestCredentialsSetKeepsItsOwnSalt(t *testing.T) {
	dir := t.TempDir()
	c, err := security.OpenCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	salt := scram.NewSalt()
	want := string(salt)
	if err := c.Set("alice", scram.SHA256, salt, scram.IterationsMin, scram.SHA256.SaltPassword("a long password", salt, scram.IterationsMin)); err != nil {
		t.Fatal(err)
	}
	for i := range salt {
		salt[i] ^= 0xff
	}
	if got, ok := c.Lookup(scram.SHA256, "alice"); !ok || string(got.Salt) != want {
		t.Fatal("the stored salt changed with the caller's slice")
	}
	if err := c.Set("bob", scram.SHA256, salt, scram.IterationsMin, scram.SHA256.SaltPassword("another password", salt, scram.IterationsMin)); err != nil {
		t.Fatal(err)
	}
	again, err := security.OpenCredentials(dir) // the file written by bob's change
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Lookup(scram.SHA256, "alice"); !ok || string(got.Salt) != want {
		t.Fatal("the credentials file holds a salt the caller overwrote")
	}
}
