package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/ring"
)

// `ringlog top --once` against a real broker with an admin listener: the partition rows
// carry the offsets produced and the ISR, the header the connection count.
func TestTopOnce(t *testing.T) {
	n, err := node.Start(node.Config{
		Core:       shard.Config{DataDir: t.TempDir(), Shards: 2, Ring: ring.Config{Backend: "auto"}},
		Listen:     "127.0.0.1:0",
		ShardPorts: node.ShardPortsOff,
		Net:        node.NetGo,
		Admin:      admin.Config{Listen: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: n.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "toptopic", 2, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{})
	defer p.Close(ctx)
	for i := range 7 {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "toptopic", Partition: 1, Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := top(ctx, topOptions{admin: n.Admin.Addr(), interval: 100 * time.Millisecond, rows: 10, once: true}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	if strings.Contains(text, clearScreen) {
		t.Error("--once cleared the screen")
	}
	var row []string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 10 && f[0] == "toptopic" && f[1] == "1" {
			row = f
		}
	}
	// TOPIC PART START END HW RECORDS/S BYTES/S(2 fields) SIZE(2 fields) SEGS ISR
	if row == nil || row[2] != "0" || row[3] != "7" || row[4] != "7" || row[len(row)-1] != "1/1" {
		t.Fatalf("no row toptopic/1 with start 0, end 7, hw 7, ISR 1/1 in:\n%s", text)
	}
	if !strings.Contains(text, "connections 1") {
		t.Errorf("header does not count the client's connection:\n%s", text)
	}
}

// `ringlog top --tls-ca` scrapes an admin listener that serves HTTPS (ringlogd --admin-tls);
// without it the scrape fails.
func TestTopOverTLS(t *testing.T) {
	ca, st := securitytest.ServerTLS(t, false)
	n, err := node.Start(node.Config{
		Core:       shard.Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}},
		Listen:     "127.0.0.1:0",
		ShardPorts: node.ShardPortsOff,
		Net:        node.NetGo,
		Admin:      admin.Config{Listen: "127.0.0.1:0", TLS: st.Config()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := topOptions{admin: n.Admin.Addr(), interval: 100 * time.Millisecond, rows: 10, once: true}
	if err := top(ctx, o, io.Discard); err == nil || !strings.Contains(err.Error(), "give --tls-ca") {
		t.Fatalf("top without --tls-ca against an HTTPS admin listener: %v (want a hint to give --tls-ca)", err)
	}
	o.tls.CAFile = ca.CAFile
	var out strings.Builder
	if err := top(ctx, o, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SHARD") {
		t.Fatalf("top over TLS printed %q", out.String())
	}
}

// `ringlog top` with nothing at --admin says what to give (it printed only Go's "Get ...:
// connection refused").
func TestTopNoAdminListener(t *testing.T) {
	addr := closedPort(t)
	err := top(context.Background(), topOptions{admin: addr, interval: 100 * time.Millisecond, rows: 10, once: true}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nothing listens on "+addr+"; give --admin (or $RINGLOG_ADMIN)") {
		t.Fatalf("top against a closed port: %v", err)
	}
}
