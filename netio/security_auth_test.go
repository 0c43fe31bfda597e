package netio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/netio/wire"
)

// logBuffer collects a server's log lines (the test greps them for secrets).
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.buf, format+"\n", args...)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// addUser stores user's credentials for both mechanisms, as `ringlog user add` does.
func addUser(t testing.TB, creds *security.Credentials, user, password string) {
	t.Helper()
	for _, m := range scram.Mechanisms {
		salt := scram.NewSalt()
		if err := creds.Set(user, m, salt, scram.IterationsMin, m.SaltPassword(password, salt, scram.IterationsMin)); err != nil {
			t.Fatal(err)
		}
	}
}

// secureBroker starts a broker whose server enforces sec, logging into log.
func secureBroker(t *testing.T, driver string, sec *netio.Security, log *logBuffer, clientCfg client.Config) *brokertest.Broker {
	t.Helper()
	return brokertest.Start(t, brokertest.Options{Driver: driver, ShardListeners: true, Client: clientCfg,
		Node: func(cfg *node.Config) {
			cfg.Server.Security = sec
			cfg.Server.Logf = log.logf
		}})
}

const testPassword = "correct horse battery staple"

// TestSCRAMAuthentication, on both drivers: with --auth required a client with the right
// SCRAM credentials (either mechanism) is served on every connection (shard listeners
// included); a wrong password, an unknown user and an unauthenticated client are refused
// and their connections closed; the password and the stored keys never reach the log.
func TestSCRAMAuthentication(t *testing.T) {
	for _, driver := range []string{"net", "ring"} {
		t.Run(driver, func(t *testing.T) {
			creds, err := security.OpenCredentials(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			addUser(t, creds, "alice", testPassword)
			log := &logBuffer{}
			sec := &netio.Security{Credentials: creds, AuthRequired: true}
			rb := secureBroker(t, driver, sec, log, client.Config{SASL: &client.SASLConfig{User: "alice", Password: testPassword}})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			produceAndFetch(t, ctx, rb.Client, "authenticated")
			if p := rb.Client.Principal(); p != "User:alice" {
				t.Fatalf("principal %q", p)
			}
			sha256Client, err := client.New(ctx, client.Config{Broker: rb.Addr, SASL: &client.SASLConfig{Mechanism: scram.SHA256.Name, User: "alice", Password: testPassword}})
			if err != nil {
				t.Fatalf("SCRAM-SHA-256: %v", err)
			}
			if _, err := sha256Client.ListTopics(ctx); err != nil {
				t.Fatalf("SCRAM-SHA-256 list: %v", err)
			}
			sha256Client.Close()

			for _, bad := range []client.SASLConfig{{User: "alice", Password: "wrong"}, {User: "mallory", Password: testPassword}, {Mechanism: "PLAIN", User: "alice", Password: testPassword}} {
				c, err := client.New(ctx, client.Config{Broker: rb.Addr, SASL: &bad})
				if err == nil {
					c.Close()
					t.Fatalf("%+v authenticated", bad.User)
				}
				if !errors.Is(err, client.ErrAuthentication) {
					t.Fatalf("%s: %v, want ErrAuthentication", bad.User, err)
				}
			}
			anonymous, err := client.New(ctx, client.Config{Broker: rb.Addr}) // ApiVersions is allowed
			if err != nil {
				t.Fatal(err)
			}
			defer anonymous.Close()
			if _, err := anonymous.ListTopics(ctx); !errors.Is(err, wire.ErrSaslAuthenticationFailed) {
				t.Fatalf("unauthenticated metadata: %v", err)
			}
			if st := rb.Node.Server.Stats(); st.AuthFailures < 2 {
				t.Fatalf("auth failures counted: %d", st.AuthFailures)
			}
			logged := log.String()
			if !strings.Contains(logged, `SASL authentication failed for user "mallory"`) {
				t.Errorf("the failed login is not logged:\n%s", logged)
			}
			checkNoSecrets(t, logged, creds, "alice")
		})
	}
}

// checkNoSecrets fails if the log holds the password, or any stored salt or key of user
// (raw or in the encodings the credentials file uses).
func checkNoSecrets(t *testing.T, logged string, creds *security.Credentials, user string) {
	t.Helper()
	if strings.Contains(logged, testPassword) {
		t.Fatal("the password is in the broker log")
	}
	for _, m := range scram.Mechanisms {
		cred, _ := creds.Lookup(m, user)
		for _, secret := range [][]byte{cred.Salt, cred.StoredKey, cred.ServerKey} {
			for _, enc := range []string{string(secret), fmt.Sprintf("%x", secret), fmt.Sprintf("%v", secret)} {
				if strings.Contains(logged, enc) {
					t.Fatalf("a stored %s secret of %s is in the broker log", m.Name, user)
				}
			}
		}
	}
}

// TestMutualTLSAuthenticates: under --auth required a client certificate is a login: its
// CN is the principal and no SASL exchange is needed.
func TestMutualTLSAuthenticates(t *testing.T) {
	ts := newTLSSetup(t, true)
	cert, key := ts.ca.Issue(t, "bob", "bob")
	bob, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ts.ca.CAFile, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	authz, err := security.OpenAuthorizer(t.TempDir(), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := authz.Add([]security.ACL{{Resource: security.ResourceTopic, Name: "*", Pattern: security.PatternLiteral, Principal: "User:bob", Operation: security.OpAll, Permission: security.Allow},
		{Resource: security.ResourceCluster, Pattern: security.PatternLiteral, Principal: "User:bob", Operation: security.OpCreate, Permission: security.Allow}}); err != nil {
		t.Fatal(err)
	}
	rb := brokertest.Start(t, brokertest.Options{Client: client.Config{TLS: bob}, Node: func(cfg *node.Config) {
		cfg.Server.TLS = ts.server.Config()
		cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	produceAndFetch(t, ctx, rb.Client, "by-certificate")
}

// TestUserAddedThroughBrokerLogsIn, on both drivers: a user added by AlterUsers over a real
// connection logs in after the adding connection has gone on sending other requests, and
// after another user change rewrote the credentials file. The broker kept the salt as a
// slice of the request's frame buffer, which later frames overwrote: the new user was
// refused until a restart, and the next change wrote the overwritten salt to the file
// (session 16, a new user's walkthrough).
func TestUserAddedThroughBrokerLogsIn(t *testing.T) {
	for _, driver := range []string{"net", "ring"} {
		t.Run(driver, func(t *testing.T) {
			dir := t.TempDir()
			creds, err := security.OpenCredentials(dir)
			if err != nil {
				t.Fatal(err)
			}
			addUser(t, creds, "alice", testPassword)
			authz, err := security.OpenAuthorizer(t.TempDir(), true, []string{"User:alice"})
			if err != nil {
				t.Fatal(err)
			}
			log := &logBuffer{}
			sec := &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz}
			rb := secureBroker(t, driver, sec, log, client.Config{SASL: &client.SASLConfig{User: "alice", Password: testPassword}})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const bobPassword = "bob's own long password"
			if err := rb.Client.UpsertUser(ctx, "bob", bobPassword, 0); err != nil {
				t.Fatal(err)
			}
			// Frames after the AlterUsers, on the same connection and on new ones, reuse
			// the buffers its salt was read from.
			produceAndFetch(t, ctx, rb.Client, "after-upsert")
			login := func(what string) {
				t.Helper()
				for _, mech := range []string{scram.SHA256.Name, scram.SHA512.Name} {
					c, err := client.New(ctx, client.Config{Broker: rb.Addr, SASL: &client.SASLConfig{Mechanism: mech, User: "bob", Password: bobPassword}})
					if err != nil {
						t.Fatalf("bob by %s %s: %v", mech, what, err)
					}
					if _, err := c.ListTopics(ctx); err != nil {
						t.Fatalf("bob by %s %s, list: %v", mech, what, err)
					}
					c.Close()
				}
			}
			login("after his upsert")
			if err := rb.Client.UpsertUser(ctx, "carol", "carol's long password", 0); err != nil {
				t.Fatal(err)
			}
			produceAndFetch(t, ctx, rb.Client, "after-second-upsert")
			login("after another user's upsert")
			again, err := security.OpenCredentials(dir) // what a restart would load
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range scram.Mechanisms {
				live, ok1 := creds.Lookup(m, "bob")
				stored, ok2 := again.Lookup(m, "bob")
				if !ok1 || !ok2 || !bytes.Equal(live.Salt, stored.Salt) || !bytes.Equal(live.StoredKey, stored.StoredKey) {
					t.Fatalf("%s: bob's credential in memory and in the file differ (%v %v)", m.Name, ok1, ok2)
				}
				// The stored salt is the one his password was salted with.
				want := m.CredentialFromSalted(m.SaltPassword(bobPassword, stored.Salt, stored.Iterations), stored.Salt, stored.Iterations)
				if !bytes.Equal(want.StoredKey, stored.StoredKey) {
					t.Fatalf("%s: bob's stored salt does not match his stored key", m.Name)
				}
			}
		})
	}
}
