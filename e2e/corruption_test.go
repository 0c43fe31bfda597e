package e2e

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestCorruptionFoundSurfacedAndRepaired: a byte flipped in the middle of a sealed segment
// of a running ringlogd is found by the background scrubber, shown by `ringlog topic
// describe` with the repair command, and a consumer gets CORRUPT_MESSAGE with the offset
// (not a spin, not a client-side CRC puzzle); after `ringlog topic repair --skip-to` on the
// stopped broker, consumers read on from the next readable offset. Issue 10 item 12.
func TestCorruptionFoundSurfacedAndRepaired(t *testing.T) {
	b := startBroker(t, "--scrub-bytes-per-sec", strconv.Itoa(64<<20))
	c := b.client(t)
	ctx := testContext(t, 90*time.Second)
	if err := c.CreateTopic(ctx, "rot", 1, map[string]string{"segment.bytes": strconv.Itoa(64 << 10), "index.interval.bytes": "256"}); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckAll})
	const records = 60
	value := bytes.Repeat([]byte("r"), 4<<10)
	for i := 0; i < records; i++ {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "rot", Partition: 0, Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	segments, err := filepath.Glob(filepath.Join(b.dataDir, "rot-0", "*.log"))
	if err != nil || len(segments) < 3 {
		t.Fatalf("segments %v (%v), want at least 3", segments, err)
	}
	sort.Strings(segments)
	flipByte(t, segments[0])

	// The scrubber (100 ms ticks) finds it; describe says where and how to repair it.
	var described string
	for attempt := 0; !strings.Contains(described, "CORRUPT_MESSAGE"); attempt++ {
		if attempt > 200 {
			t.Fatalf("describe never reported the corruption:\n%s\nbroker log:\n%s", described, b.logText())
		}
		time.Sleep(25 * time.Millisecond) // a real process: wait for its scrubber tick
		described = ok(t, "", nil, "topic", "describe", "rot", "--broker", b.addr).stdout
	}
	m := regexp.MustCompile(`--skip-to (\d+)`).FindStringSubmatch(described)
	if m == nil || !strings.Contains(described, "ringlog topic repair rot") {
		t.Fatalf("describe does not say how to repair:\n%s", described)
	}
	next, _ := strconv.ParseInt(m[1], 10, 64)
	if !strings.Contains(b.logText(), "corrupt batch in sealed segment") {
		t.Fatalf("broker did not log the corruption:\n%s", b.logText())
	}

	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 50 * time.Millisecond})
	co.Assign("rot", 0, client.Earliest())
	var pollErr error
	for polls := 0; pollErr == nil; polls++ {
		if polls > 1000 {
			t.Fatal("the consumer never reached the corrupt batch")
		}
		_, pollErr = co.Poll(ctx)
	}
	if !errors.Is(pollErr, wire.ErrCorruptMessage) || !strings.Contains(pollErr.Error(), "next readable offset is "+m[1]) {
		t.Fatalf("consumer at the corrupt batch: %v", pollErr)
	}

	fails(t, "repair needs the broker stopped", nil, "topic", "repair", "rot", "--data", b.dataDir, "--partition", "0", "--skip-to", m[1])
	b.stop()
	out := ok(t, "", nil, "topic", "repair", "rot", "--data", b.dataDir, "--partition", "0", "--skip-to", m[1]).stdout
	if !strings.Contains(out, "0 corrupt batch(es) left") {
		t.Fatalf("repair output:\n%s", out)
	}
	b.restart()
	c = b.client(t)
	co = c.NewConsumer(client.ConsumerConfig{MaxWait: 50 * time.Millisecond})
	co.Assign("rot", 0, client.Earliest())
	read := int64(0)
	for polls := 0; next+read < records; polls++ {
		if polls > 1000 {
			t.Fatalf("read %d records after the repair, want %d", read, records-next)
		}
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatalf("consume after repair: %v", err)
		}
		for _, r := range recs {
			if r.Offset != next+read || !bytes.Equal(r.Value, value) {
				t.Fatalf("record at %d, want %d", r.Offset, next+read)
			}
			read++
		}
	}
}

// flipByte flips one byte in the middle of a file, as a bad disk would.
func flipByte(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	one := []byte{0}
	at := info.Size() / 2
	if _, err := f.ReadAt(one, at); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x04
	if _, err := f.WriteAt(one, at); err != nil {
		t.Fatal(err)
	}
}
