package e2e

import (
	"bytes"

	"fmt"
	"math/rand"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/ring"
)

// faultSeedEnv replays a TestReplicationRandomFaults schedule.
const faultSeedEnv = "RINGLOG_E2E_SEED"

// TestReplicationRandomFaults runs an acks=all producer (following leadership) against 3
// brokers, RF=3, min.insync.replicas=2, while a schedule drawn from a seed kills (-9) and
// restarts, or freezes (SIGSTOP) and thaws, one broker at a time. Then every broker stops
// and a checker proves: no acknowledged record lost or changed, no offset acknowledged
// twice for different data, and the replicas byte-identical up to the smallest log end.
// Two faults normally; RINGLOG_E2E_LONG=1 runs twenty. The seed is printed; replay with
// RINGLOG_E2E_SEED=N.
func TestReplicationRandomFaults(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv(faultSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", faultSeedEnv, s, err)
		}
	}
	t.Logf("seed %d (replay: %s=%d)", seed, faultSeedEnv, seed)
	rng := rand.New(rand.NewSource(seed))
	faults := 2
	if long() {
		faults = 20
	}
	tc := startCluster(t, 3)
	ctx := testContext(t, time.Duration(faults)*time.Minute+2*time.Minute)
	tc.createReplicated(ctx, "chaos", map[string]string{"min.insync.replicas": "2"})

	acked := map[int64][]byte{}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			value := []byte(fmt.Sprintf("chaos-%d-%d", seed, i))
			res, perr := tc.produce(ctx, "chaos", wire.AcksAll, value)
			if perr != nil { // no leader took it within a minute (tc.produce retries NOT_ENOUGH_REPLICAS): retry later
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if old, ok := acked[res.BaseOffset]; ok && !bytes.Equal(old, value) {
				err = fmt.Errorf("offset %d acknowledged twice: %q and %q", res.BaseOffset, old, value)
				return
			}
			acked[res.BaseOffset] = value
		}
	}()
	for f := 0; f < faults; f++ {
		b := tc.brokers[rng.Intn(len(tc.brokers))]
		pause := time.Duration(500+rng.Intn(3500)) * time.Millisecond
		time.Sleep(time.Duration(500+rng.Intn(1500)) * time.Millisecond)
		if rng.Intn(2) == 0 {
			t.Logf("fault %d: kill -9 node %d, restart after %v", f, tc.idOf(b), pause)
			b.kill()
			time.Sleep(pause)
			b.restart()
		} else {
			t.Logf("fault %d: SIGSTOP node %d for %v", f, tc.idOf(b), pause)
			b.signal(t, syscall.SIGSTOP)
			time.Sleep(pause)
			b.signal(t, syscall.SIGCONT)
		}
		tc.waitFor("a full ISR again", func(v *cluster.View) bool {
			p := partitionOf(v, "chaos")
			return p != nil && p.Leader > 0 && len(p.ISR) == 3
		}, tc.brokers[0])
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records acknowledged", len(acked))
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged")
	}
	leader := tc.leaderAnswering(t, "chaos")
	got, _ := readAll(t, leader.client(t), leader.addr, "chaos")
	for off, want := range acked {
		if !bytes.Equal(got[off], want) {
			t.Fatalf("acknowledged offset %d reads %q from the leader, want %q (seed %d)", off, got[off], want, seed)
		}
	}
	// Every replica holds the same bytes up to the shortest log (the followers copy the
	// leader's batches as they are).
	time.Sleep(time.Second) // a last fetch round for the followers
	var logs [][]byte
	for _, b := range tc.brokers {
		b.stop()
		logs = append(logs, readPartitionFiles(t, b.dataDir, "chaos"))
	}
	short := len(logs[0])
	for _, l := range logs {
		short = min(short, len(l))
	}
	for i := 1; i < len(logs); i++ {
		if !bytes.Equal(logs[0][:short], logs[i][:short]) {
			t.Fatalf("node 1 and node %d differ within their first %d bytes (seed %d)", i+1, short, seed)
		}
	}
	t.Logf("replicas identical over %d bytes (logs of %d, %d and %d bytes)", short, len(logs[0]), len(logs[1]), len(logs[2]))
}

// readPartitionFiles reads partition 0 of topic from a stopped broker's data directory.
func readPartitionFiles(t *testing.T, dataDir, topic string) []byte {
	t.Helper()
	l, _, err := engine.OpenLog(engine.PartitionDir(dataDir, topic, 0), engine.LogConfig{}, ring.Syscalls{})
	if err != nil {
		t.Fatalf("open %s: %v", dataDir, err)
	}
	defer l.Close()
	var out []byte
	for off := l.StartOffset(); off < l.EndOffset(); {
		rr, err := l.Read(off, 1<<20)
		if err != nil {
			t.Fatalf("read %s at %d: %v", dataDir, off, err)
		}
		if out, err = rr.AppendTo(out); err != nil {
			t.Fatal(err)
		}
		if rr.NextOffset <= off {
			break
		}
		off = rr.NextOffset
	}
	return out
}
