package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// Clients that follow the cluster (issue 12's "clients follow leadership"): seed lists,
// metadata version 1, and the retries across a leader change, on real ringlogd processes.

// TestReplicationClientSeedDies: a client seeded with broker 1 only learns the three
// brokers from metadata and keeps producing and consuming after broker 1 is killed with
// SIGKILL (it moves its home broker, and the partition's leader when broker 1 led it); the
// CLI given several seeds works with the first one dead.
func TestReplicationClientSeedDies(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	tc.createReplicated(ctx, "seeded", map[string]string{"min.insync.replicas": "2"})
	seed := tc.node(1)
	c := seed.client(t)
	if _, err := c.Partitions(ctx, "seeded"); err != nil {
		t.Fatal(err)
	}
	if brokers := c.Brokers(); len(brokers) != 3 {
		t.Fatalf("the client learned brokers %v from metadata, want all 3", brokers)
	}
	t.Logf("partition 0 is led by node %d; killing node 1", tc.idOf(tc.leader("seeded")))
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckAll, Linger: time.Millisecond})
	const half = 100
	produceSeq := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := p.SendSync(ctx, &client.Record{Topic: "seeded", Partition: 0, Value: []byte(fmt.Sprintf("seeded-%03d", i))}); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produceSeq(0, half)
	seed.kill()
	start := time.Now()
	produceSeq(half, 2*half)
	t.Logf("produced %d records after the kill in %v; home broker now %s", half, time.Since(start).Round(time.Millisecond), c.BrokerAddr())
	if c.BrokerAddr() == seed.addr {
		t.Fatalf("the client still uses the dead seed %s as its home broker", seed.addr)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	co.Assign("seeded", 0, client.Earliest())
	seen := map[string]int{}
	for n := 0; n < 2*half; {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d records: %v", n, err)
		}
		for _, r := range recs {
			seen[string(r.Value)]++
			n++
		}
	}
	for i := 0; i < 2*half; i++ {
		if k := seen[fmt.Sprintf("seeded-%03d", i)]; k != 1 {
			t.Fatalf("record %d consumed %d times, want once", i, k)
		}
	}
	latest, err := c.ListOffset(ctx, "seeded", 0, wire.TimestampLatest)
	if err != nil || latest != 2*half {
		t.Fatalf("latest offset %d (%v), want %d", latest, err, 2*half)
	}

	// The CLI with the dead broker first in its seed list.
	out := ok(t, "", nil, "--broker", seed.addr, "--broker", tc.node(2).addr+","+tc.node(3).addr, "topic", "describe", "seeded").stdout
	if !strings.Contains(out, "LEADER-HWM") || !regexp.MustCompile(`(?m)^\s+0\s+[23]\s+\d+\s+\[[\d,]+\]\s+\[[\d,]+\]\s+200\s*$`).MatchString(out) {
		t.Fatalf("topic describe after the seed died: want partition 0 led by node 2 or 3 at high watermark 200:\n%s", out)
	}
}

// TestReplicationCLIProduceLeaderKill: `ringlog produce --acks all` streams keyed lines
// while the partition's leader (also the CLI's first seed) is killed with SIGKILL. The
// command must outlast the election and exit 0, and every line it acknowledged — all of
// them — must be in the new leader's log exactly once (the producer's idempotence carries
// over the leader change).
func TestReplicationCLIProduceLeaderKill(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	tc.createReplicated(ctx, "clip", map[string]string{"min.insync.replicas": "2"})
	leader := tc.leader("clip")
	other := tc.followers(leader)[0]
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ringlog"), "--broker", leader.addr+","+other.addr,
		"produce", "clip", "--acks", "all", "--key-separator", ":", "--linger", "1ms", "--batch-bytes", "2048")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	const total = 6000
	w := bufio.NewWriter(stdin)
	for i := 0; i < total; i++ {
		fmt.Fprintf(w, "k%02d:clip-%05d\n", i%37, i)
		if i == total/3 {
			// Let the first third reach the broker, then kill the leader while the rest
			// streams in.
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			waitForOffset(t, ctx, tc.c, "clip", total/6)
			leader.kill()
			t.Logf("killed the leader, node %d", tc.idOf(leader))
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	start := time.Now()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ringlog produce: %v\nstderr: %s", err, stderr.String())
	}
	t.Logf("ringlog produce finished %v after stdin closed: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	m := regexp.MustCompile(`produced (\d+) records`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no summary on stderr: %s", stderr.String())
	}
	if n, _ := strconv.Atoi(m[1]); n != total {
		t.Fatalf("ringlog produce acknowledged %d records, want %d", n, total)
	}
	var newLeader *broker
	for newLeader = tc.leader("clip"); newLeader == nil || newLeader == leader; newLeader = tc.leader("clip") {
		if ctx.Err() != nil {
			t.Fatal("no new leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
	got, hwm := readAll(t, newLeader.client(t), newLeader.addr, "clip")
	seen := map[string]int{}
	for _, v := range got {
		seen[string(v)]++
	}
	for i := 0; i < total; i++ {
		if k := seen[fmt.Sprintf("clip-%05d", i)]; k != 1 {
			t.Fatalf("line %d is in the log %d times, want once (high watermark %d)", i, k, hwm)
		}
	}
	if len(got) != total {
		t.Fatalf("%d records in the log, want %d", len(got), total)
	}
}

// waitForOffset waits until partition 0 of topic has a high watermark of at least n.
func waitForOffset(t *testing.T, ctx context.Context, c *client.Client, topic string, n int64) {
	t.Helper()
	for {
		off, err := c.ListOffset(ctx, topic, 0, wire.TimestampLatest)
		if err == nil && off >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never reached offset %d: %v", topic, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
