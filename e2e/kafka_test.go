package e2e

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
)

// kcat runs kcat (librdkafka's command-line client; .ci/run installs the Debian package)
// against a broker's Kafka listener and returns its stdout.
func kcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed (.ci/run installs the Debian package kcat)")
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("kcat %v: no exit within 60 s\nstderr: %s", args, stderr.String())
	}
	if err != nil {
		t.Fatalf("kcat %v: %v\nstderr: %s", args, err, stderr.String())
	}
	return stdout.String()
}

// TestKcat runs an unmodified Kafka client (kcat, on librdkafka) against a real ringlogd's
// Kafka listener: produce keyed lines with each codec librdkafka offers, consume them back
// with their keys, consume them with a consumer group and resume it from its commits, and
// look offsets up by time.
func TestKcat(t *testing.T) {
	kafkaAddr := freeAddr(t)
	b := startBroker(t, "--kafka-listen", kafkaAddr)
	c := b.client(t)
	ctx := testContext(t, 2*time.Minute)
	if err := c.CreateTopic(ctx, "kcat", 3, nil); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		var lines []string
		for i := range 50 {
			lines = append(lines, fmt.Sprintf("key-%d:%s-%d", i%7, codec, i))
		}
		kcat(t, strings.Join(lines, "\n")+"\n", "-b", kafkaAddr, "-P", "-t", "kcat", "-K:", "-z", codec,
			"-X", "enable.idempotence=true")
		want = append(want, lines...)
	}
	out := kcat(t, "", "-b", kafkaAddr, "-C", "-t", "kcat", "-o", "beginning", "-e", "-q", "-f", "%k:%s\n")
	got := strings.Split(strings.TrimSpace(out), "\n")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("kcat consumed %d lines, want %d; first: %q", len(got), len(want), got[:min(3, len(got))])
	}

	// A consumer group: kcat -G reads everything and commits; a second run of the same
	// group reads only what was produced since, and the ringlog protocol sees the commits.
	out = kcat(t, "", "-b", kafkaAddr, "-G", "kcat-group", "-o", "beginning", "-e", "-q", "-f", "%k:%s\n", "kcat")
	if got := strings.Count(out, "\n"); got != len(want) {
		t.Fatalf("kcat -G consumed %d lines, want %d", got, len(want))
	}
	kcat(t, "later:one\nlater:two\n", "-b", kafkaAddr, "-P", "-t", "kcat", "-K:")
	out = kcat(t, "", "-b", kafkaAddr, "-G", "kcat-group", "-e", "-q", "-f", "%k:%s\n", "kcat")
	if lines := strings.Fields(out); len(lines) != 2 || !slices.Contains(lines, "later:one") || !slices.Contains(lines, "later:two") {
		t.Fatalf("kcat -G after a restart of the group consumed %q, want the 2 new lines", lines)
	}
	committed, err := c.FetchCommitted(ctx, "kcat-group")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, o := range committed {
		sum += o.Offset
	}
	if sum != int64(len(want)+2) {
		t.Fatalf("committed offsets seen over the ringlog protocol sum to %d, want %d: %+v", sum, len(want)+2, committed)
	}

	// Offsets by time: records with known timestamps (written with the bundled client
	// over the ringlog protocol), looked up with kcat -Q over Kafka.
	if err := c.CreateTopic(ctx, "kcat-time", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 10 {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "kcat-time", Partition: 0, Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close(ctx)
	for _, tc := range []struct {
		at   time.Time
		want string
	}{{base, "offset 0"}, {base.Add(4*time.Minute + time.Second), "offset 5"}} {
		out := kcat(t, "", "-b", kafkaAddr, "-Q", "-t", fmt.Sprintf("kcat-time:0:%d", tc.at.UnixMilli()))
		if !strings.Contains(out, tc.want) {
			t.Errorf("kcat -Q at %v: %q, want %q", tc.at, out, tc.want)
		}
	}
}
