package e2e

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
)

// TestReplicationTLSAndSASL: 3 brokers whose listeners serve TLS only, require SASL and
// enforce ACLs. The brokers dial each other over TLS (--inter-broker-tls-ca, their own
// certificate as client certificate; the raft transport too) and log in as User:broker
// (--inter-broker-credentials-file, a super-user). A client with credentials and ACLs
// produces RF=3 acks=all; the followers replicate (ISR 3, the high watermark covers every
// record); kill -9 of the leader loses no acknowledged record. The old leader restarted
// with a wrong inter-broker password stays out of the ISR, logs why, and no log holds a
// password; the right password and a SIGHUP bring it back. The raft port is TLS and
// wants a broker certificate.
func TestReplicationTLSAndSASL(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "cluster")
	cert, key := ca.Issue(t, "broker", "broker")
	const (
		brokerPassword = "inter-broker-secret-7311"
		wrongPassword  = "not-the-broker-secret-5519"
		adminPassword  = "admin-secret-2287"
		alicePassword  = "alice-secret-9034"
	)
	credsFile := filepath.Join(dir, "broker.creds")
	wrongFile := filepath.Join(dir, "wrong.creds")
	for file, password := range map[string]string{credsFile: brokerPassword, wrongFile: wrongPassword} {
		if err := os.WriteFile(file, []byte("broker\n"+password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	prepare := func(b *broker) {
		creds, err := security.OpenCredentials(b.dataDir)
		if err != nil {
			t.Fatal(err)
		}
		securitytest.AddUser(t, creds, "admin", adminPassword)
		securitytest.AddUser(t, creds, "broker", brokerPassword)
		securitytest.AddUser(t, creds, "alice", alicePassword)
	}
	clientAs := func(user, password string) func(b *broker) *client.Client {
		return func(b *broker) *client.Client {
			ctx := testContext(t, 30*time.Second)
			c, err := client.New(ctx, client.Config{Broker: b.addr, ClientID: "e2e", TLS: ca.ClientTLS(t, ""),
				SASL: &client.SASLConfig{User: user, Password: password}})
			if err != nil {
				t.Fatalf("connect to %s as %s: %v", b.addr, user, err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
	}
	tc := startClusterPrepared(t, 3, 0, nil, prepare, clientAs("admin", adminPassword),
		"--tls-cert", cert, "--tls-key", key, "--inter-broker-tls-ca", ca.CAFile,
		"--inter-broker-credentials-file", credsFile, "--auth", "required", "--acl", "on",
		"--super-users", "User:admin,User:broker", "--log-level", "debug")
	ctx := testContext(t, 3*time.Minute)

	// alice may write and read the topic and see the cluster, on every broker (ACLs are
	// per broker), granted with the CLI.
	admin := []string{"RINGLOG_SASL_PASSWORD=" + adminPassword}
	for _, b := range tc.brokers {
		tls := []string{"--broker", b.addr, "--tls-ca", ca.CAFile, "--sasl-user", "admin"}
		ok(t, "", admin, append([]string{"acl", "add", "--principal", "User:alice", "--topic", "secure", "--operation", "read,write"}, tls...)...)
		ok(t, "", admin, append([]string{"acl", "add", "--principal", "User:alice", "--cluster", "--operation", "describe"}, tls...)...)
	}
	tc.createReplicated(ctx, "secure", map[string]string{"min.insync.replicas": "2"})
	tc.c = clientAs("alice", alicePassword)(tc.brokers[0])

	acked := map[int64][]byte{}
	// tc.produce retries NOT_ENOUGH_REPLICAS: on a loaded machine the controller quorum can
	// lose its leader for a moment when a voter restarts, and a follower that lagged
	// meanwhile leaves the ISR until it catches up.
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			value := []byte(fmt.Sprintf("secure-%05d", i))
			res, err := tc.produce(ctx, "secure", wire.AcksAll, value)
			if err != nil {
				t.Fatalf("produce %d as alice: %v", i, err)
			}
			acked[res.BaseOffset] = value
		}
	}
	produce(0, 100)
	leader := tc.leader("secure")
	if _, hwm := readAll(t, tc.c, leader.addr, "secure"); hwm != 100 {
		t.Fatalf("high watermark %d after 100 acks=all records, want 100", hwm)
	}
	if p := partitionOf(tc.view(leader), "secure"); p == nil || len(p.ISR) != 3 {
		t.Fatalf("ISR after replicated produces: %+v, want 3 replicas", p)
	}

	// kill -9 the leader: every acknowledged record survives on the new one.
	oldID := tc.idOf(leader)
	leader.kill()
	survivor := tc.followers(leader)[0]
	tc.waitFor("a new leader", func(v *cluster.View) bool {
		p := partitionOf(v, "secure")
		return p != nil && p.Leader > 0 && p.Leader != oldID
	}, survivor)
	produce(100, 50)
	got, hwm := readAll(t, tc.c, tc.leader("secure").addr, "secure")
	if hwm != 150 {
		t.Errorf("high watermark %d after 150 acknowledged records, want 150", hwm)
	}
	for off, want := range acked {
		if !bytes.Equal(got[off], want) {
			t.Fatalf("acknowledged offset %d: read %q from the new leader, want %q", off, got[off], want)
		}
	}

	// The old leader comes back with the wrong inter-broker password: its fetches are
	// refused, it says so, and it stays out of the ISR while acks=all flows at ISR 2.
	leader.flags[slices.Index(leader.flags, credsFile)] = wrongFile
	leader.restart()
	waitLog(t, "inter-broker authentication failed", leader)
	// The broker it dialed (the controller leader's) logs the refused login too.
	waitLog(t, `SASL authentication failed for user "broker"`, tc.followers(leader)...)
	produce(150, 20)
	tc.waitFor("an ISR of the two brokers that can log in", func(v *cluster.View) bool {
		p := partitionOf(v, "secure")
		return p != nil && !slices.Contains(p.ISR, oldID) && len(p.ISR) == 2
	}, survivor)
	if p := partitionOf(tc.view(survivor), "secure"); p == nil || slices.Contains(p.ISR, oldID) {
		t.Errorf("ISR with a broker that cannot log in: %+v, want the two others", p)
	}
	for _, b := range tc.brokers {
		logged := b.logText()
		for _, secret := range []string{brokerPassword, wrongPassword, adminPassword, alicePassword} {
			if strings.Contains(logged, secret) {
				t.Errorf("node %d logged a password", tc.idOf(b))
			}
		}
	}
	line := logLine(leader, "level=WARN", "inter-broker authentication failed")
	if line == "" {
		t.Errorf("the refused login is not logged at warning level:\n%s", leader.logText())
	}
	t.Logf("the broker with the wrong password logs: %s", line)

	// The right password in its file and a SIGHUP: it logs in, registers, catches up and
	// rejoins the ISR without a restart.
	if err := os.WriteFile(wrongFile, []byte("broker\n"+brokerPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	leader.signal(t, syscall.SIGHUP)
	tc.waitFor("the broker back in the ISR after its credentials were reloaded", func(v *cluster.View) bool {
		p := partitionOf(v, "secure")
		return p != nil && len(p.ISR) == 3
	}, survivor)

	// The raft port speaks TLS and refuses a client without a broker certificate.
	voters := leader.flags[slices.Index(leader.flags, "--controller-voters")+1]
	_, raftAddr, _ := strings.Cut(strings.Split(voters, ",")[0], "@")
	if err := tlsExchange(raftAddr, ca.ClientTLS(t, "")); err == nil {
		t.Error("the raft listener accepted a TLS client without a certificate")
	}
	if err := tlsExchange(raftAddr, ca.ClientTLS(t, "broker")); err != nil {
		t.Errorf("the raft listener refused a broker certificate: %v", err)
	}
}

// tlsExchange completes a TLS handshake with addr and sees whether the server keeps the
// connection: TLS 1.3 reports a refused client certificate on the first read.
func tlsExchange(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil // still open: the handshake was accepted, and raft waits for an RPC
	}
	return err
}

// waitLog waits until the log of one of brokers holds want.
func waitLog(t *testing.T, want string, brokers ...*broker) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(brokers, func(b *broker) bool { return strings.Contains(strings.ReplaceAll(b.logText(), `\"`, `"`), want) }) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logLine is the first line of b's log holding every one of want.
func logLine(b *broker, want ...string) string {
	for _, line := range strings.Split(b.logText(), "\n") {
		if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
			return line
		}
	}
	return ""
}
