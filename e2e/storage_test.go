package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of sizeBytes on a fresh directory for the test, or skips it
// saying why (mounting needs root or CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, sizeBytes int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(sizeBytes, 10)); err != nil {
		t.Skipf("cannot mount a %d-byte tmpfs here (%v): the full-disk test needs root or CAP_SYS_ADMIN", sizeBytes, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// produceRaw sends one batch of one record with acks=all and returns the partition's answer.
func produceRaw(ctx context.Context, t *testing.T, c *client.Client, addr, topic string, value []byte) wire.ProduceResponsePartition {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(time.Now().UnixMilli(), nil, value, nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	var resp wire.ProduceResponse
	req := &wire.ProduceRequest{Acks: -1, Topics: []wire.ProduceTopic{{Topic: topic, Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}}
	if err := c.Call(ctx, addr, req, &resp); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return resp.Topics[0].Partitions[0]
}

// TestFullDiskIsAnOperatingCondition runs ringlogd on a 24 MiB tmpfs with
// --disk-free-min-bytes 6 MiB: once the disk fills to the threshold, produces fail fast
// with STORAGE_ERROR naming the disk; every acknowledged record still reads back; the
// broker stays up; and produces succeed again by themselves once space is freed.
func TestFullDiskIsAnOperatingCondition(t *testing.T) {
	disk := mountTmpfs(t, 24<<20)
	filler := filepath.Join(disk, "filler")
	if err := os.WriteFile(filler, bytes.Repeat([]byte{1}, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBroker(t, "--disk-free-min-bytes", strconv.Itoa(6<<20), "--scrub-bytes-per-sec", "0")
	b.dataDir = filepath.Join(disk, "data")
	b.addr = freeAddr(t)
	if err := b.tryStart(); err != nil {
		t.Fatalf("start ringlogd: %v", err)
	}
	c := b.client(t)
	ctx := testContext(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "full", 1, map[string]string{"segment.bytes": strconv.Itoa(1 << 20)}); err != nil {
		t.Fatal(err)
	}

	value := bytes.Repeat([]byte("x"), 64<<10)
	acked := 0
	var refused wire.ProduceResponsePartition
	for i := 0; i < 1000; i++ { // 1000 x 64 KiB is far more than the disk holds
		r := produceRaw(ctx, t, c, b.addr, "full", value)
		if r.ErrorCode != wire.ErrNone {
			refused = r
			break
		}
		acked++
	}
	if refused.ErrorCode != wire.ErrStorage || !strings.Contains(refused.ErrorMessage, disk) || !strings.Contains(refused.ErrorMessage, "disk free minimum") {
		t.Fatalf("after %d acknowledged produces: %s %q, want STORAGE_ERROR naming %s", acked, refused.ErrorCode.Name(), refused.ErrorMessage, disk)
	}
	if acked < 100 {
		t.Fatalf("only %d produces acknowledged before the disk was full", acked)
	}
	t.Logf("refused after %d acknowledged 64 KiB records: %s", acked, refused.ErrorMessage)

	// Reads keep working and return every acknowledged record.
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	co.Assign("full", 0, client.AtOffset(0))
	read := 0
	for polls := 0; read < acked; polls++ {
		if polls > 10_000 {
			t.Fatalf("read %d of %d acknowledged records", read, acked)
		}
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatalf("consume on a full disk: %v", err)
		}
		for _, r := range recs {
			if !bytes.Equal(r.Value, value) {
				t.Fatalf("record %d changed", r.Offset)
			}
		}
		read += len(recs)
	}

	// The operator frees space: produces go through again without a restart. The broker
	// re-reads the free space at most every 100 ms.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var again wire.ProduceResponsePartition
	for attempt := 0; attempt < 100; attempt++ {
		if again = produceRaw(ctx, t, c, b.addr, "full", value); again.ErrorCode == wire.ErrNone {
			break
		}
		time.Sleep(20 * time.Millisecond) // a real process: its clock cannot be injected
	}
	if again.ErrorCode != wire.ErrNone || again.BaseOffset != int64(acked) {
		t.Fatalf("produce after space came back: %s %q at %d, want offset %d", again.ErrorCode.Name(), again.ErrorMessage, again.BaseOffset, acked)
	}
	if !b.running() {
		t.Fatal("ringlogd exited")
	}
}
