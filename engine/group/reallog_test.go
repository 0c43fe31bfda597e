package group

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// logDriver carries out a coordinator's appends on a real engine.Log (the shape the shard
// driver will have): encode, append, fdatasync, then AppendDone.
type logDriver struct {
	t       *testing.T
	c       *Coordinator
	log     *engine.Log
	builder *batch.Builder
	now     time.Time
	replies map[uint64]Response
}

func (d *logDriver) handle(r Request) {
	d.c.Handle(d.now, r)
	d.drain()
}

func (d *logDriver) drain() {
	for range 100 {
		outs := d.c.Ready()
		if len(outs) == 0 {
			return
		}
		for _, o := range outs {
			switch o := o.(type) {
			case Reply:
				d.replies[o.ReqID] = o.Response
			case Append:
				b, err := EncodeBatch(nil, d.builder, o.Records, d.now.UnixMilli())
				if err == nil {
					_, err = d.log.Append(b)
				}
				if err == nil {
					err = d.log.Sync()
				}
				d.c.AppendDone(d.now, o.ID, err)
			}
		}
	}
	d.t.Fatal("outputs did not stop")
}

func openOffsetsLog(t *testing.T, dir string) *engine.Log {
	t.Helper()
	l, _, err := engine.OpenLog(dir, engine.LogConfig{SegmentBytes: 4 << 10, RetentionMs: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ring.Syscalls{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// state is what a restart must preserve: every group's description and offsets.
func state(t *testing.T, c *Coordinator, groups []string) string {
	t.Helper()
	c.Handle(t0, DescribeGroups{ReqID: 1, Groups: groups})
	out := ""
	for _, g := range groups {
		c.Handle(t0, OffsetFetch{ReqID: 2, Group: g})
	}
	for _, o := range c.Ready() {
		out += fmt.Sprintf("%+v\n", o.(Reply).Response)
	}
	return out
}

// Committed offsets and group metadata survive a restart through real segment files
// (several segments), and a batch torn by a crash before its sync — a commit that was
// never acknowledged — is dropped by recovery and absent after the rebuild.
func TestRestartFromRealLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "__consumer_offsets-0")
	d := &logDriver{t: t, c: New(Config{OffsetsPartitions: 1}), log: openOffsetsLog(t, dir),
		builder: batch.NewBuilder(batch.BuilderOptions{}), now: t0, replies: map[uint64]Response{}}
	if err := d.c.Load(d.now, 0, NewReplayer().Snapshot()); err != nil {
		t.Fatal(err)
	}
	join := JoinGroup{ReqID: 1, Group: "billing", InstanceID: "i1", ClientID: "c", SessionTimeout: 10 * time.Second,
		RebalanceTimeout: time.Minute, ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: []byte{0, 1}}}}
	d.handle(join)
	joined := d.replies[1].(JoinGroupResponse)
	d.handle(SyncGroup{ReqID: 2, Group: "billing", MemberID: joined.MemberID, Generation: joined.Generation,
		Assignments: []MemberAssignment{{MemberID: joined.MemberID, Assignment: []byte{9, 9}}}})
	req := uint64(10)
	for i := range 100 {
		req++
		d.handle(OffsetCommit{ReqID: req, Group: "billing", MemberID: joined.MemberID, Generation: joined.Generation,
			Offsets: []CommitOffset{{Topic: "payments", Partition: int32(i % 8), Offset: int64(i), LeaderEpoch: 1, Metadata: "m"}}})
		req++
		d.handle(OffsetCommit{ReqID: req, Group: "audit", Generation: -1,
			Offsets: []CommitOffset{{Topic: "payments", Partition: int32(i % 3), Offset: int64(1000 + i), LeaderEpoch: -1}}})
	}
	d.handle(OffsetCommit{ReqID: 999, Group: "gone", Generation: -1, Offsets: []CommitOffset{{Topic: "t", Offset: 1}}})
	d.handle(DeleteGroups{ReqID: 1000, Groups: []string{"gone"}})
	if got := d.replies[1000].(DeleteGroupsResponse).Results[0].Err; got != CodeNone {
		t.Fatalf("delete: %s", got)
	}
	if d.log.SegmentCount() < 3 {
		t.Fatalf("want several segments, got %d", d.log.SegmentCount())
	}
	groups := []string{"audit", "billing", "gone"}
	before := state(t, d.c, groups)

	// A last commit reaches the file but the process dies before its sync returns: it was
	// never acknowledged. Tear the batch, as a crash mid-write would.
	b, _ := EncodeBatch(nil, d.builder, []Record{OffsetRecord("billing", "payments", 0, OffsetValue{Offset: 1 << 40})}, 1)
	if _, err := d.log.Append(b); err != nil {
		t.Fatal(err)
	}
	if err := d.log.Close(); err != nil {
		t.Fatal(err)
	}
	segments, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	slices.Sort(segments)
	active := segments[len(segments)-1]
	info, err := os.Stat(active)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(active, info.Size()-5); err != nil {
		t.Fatal(err)
	}

	reopened := openOffsetsLog(t, dir)
	defer reopened.Close()
	snap, err := ReplayLog(reopened)
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{OffsetsPartitions: 1})
	c.BeginLoad(0)
	if err := c.Load(t0, 0, snap); err != nil {
		t.Fatal(err)
	}
	if after := state(t, c, groups); after != before {
		t.Fatalf("state after restart differs:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if !reflect.DeepEqual(snap.GroupIDs(), []string{"audit", "billing"}) {
		t.Fatalf("groups %v", snap.GroupIDs())
	}
	// The restored static member keeps its id and generation: its heartbeat works.
	c.Handle(t0, Heartbeat{ReqID: 5, Group: "billing", MemberID: joined.MemberID, InstanceID: "i1", Generation: joined.Generation})
	if got := c.Ready()[0].(Reply).Response.(HeartbeatResponse).Err; got != CodeNone {
		t.Fatalf("heartbeat after restart: %s", got)
	}
}
