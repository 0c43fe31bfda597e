package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/ring"
)

// startBroker runs the real broker core (engine/shard behind netio's server) in-process on
// a temp dir and a 127.0.0.1 port, and returns its address. The e2e package tests the
// binaries; these tests cover the CLI's own logic against the same broker.
func startBroker(t testing.TB) string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := shard.Open(shard.Config{
		DataDir: t.TempDir(),
		Shards:  2,
		Ring:    ring.Config{Backend: "auto"},
		Log:     engine.LogConfig{Storage: engine.StoragePageCache},
		Logger:  logger,
	})
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	var listeners []net.Listener
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Close()
		t.Fatalf("listen: %v", err)
	}
	listeners = append(listeners, ln)
	addr := ln.Addr().String()
	ln2, err := netio.ListenShard(context.Background(), addr)
	if err != nil {
		b.Close()
		t.Fatalf("listen second shard: %v", err)
	}
	listeners = append(listeners, ln2)
	srv := netio.NewServer(netio.NewBrokerHandler(b, addr), netio.Config{})
	served := make(chan error, len(listeners))
	for i, l := range listeners {
		go func() { served <- srv.Serve(l, i) }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		for range listeners {
			if err := <-served; !errors.Is(err, netio.ErrServerClosed) {
				t.Errorf("serve: %v", err)
			}
		}
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return addr
}

func TestParseArgs(t *testing.T) {
	var usage bytes.Buffer
	usageOutput = &usage
	defer func() { usageOutput = os.Stderr }()
	for _, tc := range []struct {
		args       []string
		positional []string
		partitions int
		err        string
	}{
		{args: []string{"create", "t", "--partitions", "3"}, positional: []string{"create", "t"}, partitions: 3},
		{args: []string{"--partitions=4", "t"}, positional: []string{"t"}, partitions: 4},
		{args: []string{"t", "--", "--partitions"}, positional: []string{"t", "--partitions"}, partitions: 1},
		{args: nil, partitions: 1},
		{args: []string{"t", "--bogus"}, err: "flag provided but not defined: -bogus"},
		{args: []string{"t", "--partitions", "x"}, err: "invalid value"},
		{args: []string{"t", "-h"}, err: errHelp.Error()},
	} {
		fs := newFlagSet("test", "test NAME")
		partitions := fs.Int("partitions", 1, "")
		positional, err := parseArgs(fs, tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if fmt.Sprint(positional) != fmt.Sprint(tc.positional) || *partitions != tc.partitions {
			t.Errorf("%q: positional %q partitions %d, want %q %d", tc.args, positional, *partitions, tc.positional, tc.partitions)
		}
	}
	if !strings.Contains(usage.String(), "usage: ringlog test NAME") || strings.Count(usage.String(), "usage:") != 1 {
		t.Errorf("usage printed for -h only, once; got %q", usage.String())
	}
}

func TestWantArgs(t *testing.T) {
	if err := wantArgs([]string{"a"}, "NAME"); err != nil {
		t.Errorf("one of one: %v", err)
	}
	if err := wantArgs(nil, "NAME"); err == nil || err.Error() != "missing NAME" {
		t.Errorf("none of one: %v", err)
	}
	if err := wantArgs([]string{"a", "b"}, "NAME"); err == nil || !strings.Contains(err.Error(), `unexpected argument "b"`) {
		t.Errorf("two of one: %v", err)
	}
}

func TestBrokerFlagFromEnv(t *testing.T) {
	t.Setenv(brokerEnv, "")
	fs := newFlagSet("test", "test")
	if b := brokerFlag(fs); *b != brokerDefault {
		t.Errorf("default broker %q, want %q", *b, brokerDefault)
	}
	t.Setenv(brokerEnv, "10.0.0.1:1234")
	fs = newFlagSet("test", "test")
	b := brokerFlag(fs)
	if *b != "10.0.0.1:1234" {
		t.Errorf("broker from env %q", *b)
	}
	if _, err := parseArgs(fs, []string{"--broker", "h:1"}); err != nil || *b != "h:1" {
		t.Errorf("--broker overrides env: %q %v", *b, err)
	}
	// Seed lists: commas, and a repeated flag adds to the list.
	fs = newFlagSet("test", "test")
	b = brokerFlag(fs)
	if _, err := parseArgs(fs, []string{"--broker", "h:1,h:2", "--broker=h:3"}); err != nil || *b != "h:1,h:2,h:3" {
		t.Errorf("repeated --broker: %q %v", *b, err)
	}
	for _, bad := range []string{"nohostport", ",", "h:1,,x"} {
		fs = newFlagSet("test", "test")
		brokerFlag(fs)
		if _, err := parseArgs(fs, []string{"--broker", bad}); err == nil {
			t.Errorf("--broker %q accepted", bad)
		}
	}
}

// A seed list whose first broker is down reaches the second.
func TestBrokerSeedList(t *testing.T) {
	addr := startBroker(t)
	t.Setenv(brokerEnv, "127.0.0.1:1,"+addr) // nothing listens on the first
	var stderr bytes.Buffer
	if code := runCLI([]string{"topic", "create", "seeded"}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

func TestParseFrom(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"earliest", "earliest"}, {"latest", "latest"}, {"0", "0"}, {"123", "123"},
		{"@1700000000000", "@1700000000000"},
		{"-1", "error"}, {"x", "error"}, {"@", "error"}, {"@-5", "error"}, {"", "error"},
	} {
		got, err := parseFrom(tc.in)
		s := got.String()
		if err != nil {
			s = "error"
		}
		if s != tc.want {
			t.Errorf("parseFrom(%q) = %s (%v), want %s", tc.in, s, err, tc.want)
		}
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		run  func([]string) error
		want string
	}{
		{[]string{"t", "--acks", "2"}, func(a []string) error { _, err := parseProduceFlags(a); return err }, "--acks"},
		{[]string{"t", "--compression", "brotli"}, func(a []string) error { _, err := parseProduceFlags(a); return err }, `--compression "brotli": want none, gzip, snappy, lz4 or zstd`},
		{[]string{"t", "--partition", "-2"}, func(a []string) error { _, err := parseProduceFlags(a); return err }, "--partition"},
		{[]string{}, func(a []string) error { _, err := parseProduceFlags(a); return err }, "missing TOPIC"},
		{[]string{"t", "u"}, func(a []string) error { _, err := parseProduceFlags(a); return err }, "unexpected argument"},
		{[]string{"t", "--from", "yesterday"}, func(a []string) error { _, err := parseConsumeFlags(a); return err }, "--from"},
		{[]string{"t", "--max", "-1"}, func(a []string) error { _, err := parseConsumeFlags(a); return err }, "--max"},
		{[]string{"t", "--partitions", "0"}, func(a []string) error { return topicCreate("", a, io.Discard) }, "--partitions"},
		{[]string{"nosuch"}, runTopic, "unknown subcommand"},
		// was "repair needs the broker stopped: open data dir lock: ...: no such file or directory"
		{[]string{"repair", "t", "--data", "/nonexistent/ringlog-data", "--partition", "0", "--truncate-to", "1"}, runTopic, "data directory /nonexistent/ringlog-data does not exist"},
	} {
		err := tc.run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

func dialTest(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTopicCommands(t *testing.T) {
	addr := startBroker(t)
	run := func(fn func(string, []string, io.Writer) error, args ...string) (string, error) {
		var out bytes.Buffer
		err := fn("", append(args, "--broker", addr), &out)
		return out.String(), err
	}
	out, err := run(topicCreate, "orders", "--partitions", "3", "--config", "retention.ms=60000", "--config", "flush.always=true")
	if err != nil || !strings.Contains(out, "created topic orders with 3 partitions") {
		t.Fatalf("create: %q %v", out, err)
	}
	if out, err := run(topicCreate, "single"); err != nil || out != "created topic single with 1 partition\n" {
		t.Errorf("create with the default partition count: %q %v", out, err)
	}
	if _, err := run(topicCreate, "orders", "--partitions", "3"); !errors.Is(err, wire.ErrTopicAlreadyExists) {
		t.Errorf("create twice: %v, want TOPIC_ALREADY_EXISTS", err)
	}
	if _, err := run(topicCreate, "bad", "--config", "no.such.key=1"); !errors.Is(err, wire.ErrInvalidConfig) {
		t.Errorf("create with unknown config: %v, want INVALID_CONFIG", err)
	}
	out, err = run(topicList)
	if err != nil || !regexpMatch(`(?m)^orders\s+3$`, out) {
		t.Errorf("list: %q %v", out, err)
	}

	c := dialTest(t, addr)
	produceTestRecords(t, c, "orders", 1, 10)
	out, err = run(topicDescribe, "orders")
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	for _, want := range []string{"topic orders  partitions 3  records 10", "PARTITION", "HIGH-WATERMARK", "config flush.always=true", "config retention.ms=60000"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe output lacks %q:\n%s", want, out)
		}
	}
	// Partition 1 holds the 10 records: log start 0, log end 10, high watermark 10.
	if !regexpMatch(`(?m)^\s+1\s+\d+\s+0\s+10\s+10\s+[1-9]\d*\s+-\s*$`, out) {
		t.Errorf("describe: no row for partition 1 with offsets 0..10:\n%s", out)
	}
	if _, err := run(topicDescribe, "nosuch"); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Errorf("describe unknown: %v", err)
	}

	out, err = run(topicConfig, "orders", "--set", "retention.ms=120000", "--delete", "flush.always")
	if err != nil || !regexpMatch(`(?m)^retention\.ms\s+120000\s+topic`, out) || !regexpMatch(`(?m)^flush\.always\s+false\s+default`, out) {
		t.Errorf("config: %q %v", out, err)
	}
	if _, err := run(topicConfig, "orders", "--set", "segment.bytes=x"); !errors.Is(err, wire.ErrInvalidConfig) {
		t.Errorf("config bad value: %v", err)
	}
	if _, err := run(topicConfig, "orders", "--set", "a=1", "--delete", "a"); err == nil {
		t.Error("config --set and --delete of one key: no error")
	}

	if out, err = run(topicDelete, "orders"); err != nil || !strings.Contains(out, "deleted topic orders") {
		t.Errorf("delete: %q %v", out, err)
	}
	if _, err := run(topicDelete, "orders"); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Errorf("delete twice: %v", err)
	}
	if out, err = run(topicList); err != nil || strings.Contains(out, "orders") {
		t.Errorf("list after delete: %q %v", out, err)
	}
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	return addr
}

func TestBrokerDown(t *testing.T) {
	addr := closedPort(t)
	err := topicList("", []string{"--broker", addr}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "connect to broker "+addr) {
		t.Errorf("broker down: %v", err)
	}
}

func regexpMatch(pattern, s string) bool {
	return regexp.MustCompile(pattern).MatchString(s)
}

func produceTestRecords(t *testing.T, c *client.Client, topic string, partition int32, count int) {
	t.Helper()
	p := c.NewProducer(client.ProducerConfig{})
	for i := range count {
		if _, err := p.SendSync(context.Background(), &client.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "v%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestProduceConsumeLines(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	ctx := context.Background()
	const partitions = 4
	if err := c.CreateTopic(ctx, "lines", partitions, nil); err != nil {
		t.Fatal(err)
	}
	const lineCount = 5000
	var in strings.Builder
	for i := range lineCount {
		fmt.Fprintf(&in, "key-%d|value %d|with separator\n", i, i)
	}
	in.WriteString("no separator here\n\n") // a null-key line and an empty line
	o, err := parseProduceFlags([]string{"lines", "--broker", addr, "--key-separator", "|", "--compression", "zstd", "--acks", "1"})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := produceLines(ctx, c, o, strings.NewReader(in.String()))
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	if sum.records != lineCount+2 {
		t.Errorf("summary: %d records, want %d", sum.records, lineCount+2)
	}
	if !strings.Contains(sum.String(), fmt.Sprintf("produced %d records", lineCount+2)) {
		t.Errorf("summary text %q", sum.String())
	}
	if one := (produceSummary{records: 1, bytes: 10}).String(); !strings.HasPrefix(one, "produced 1 record, 10 bytes in ") {
		t.Errorf("summary of one record %q", one)
	}

	// Everything back, with keys, offsets and the same separator.
	co, err := parseConsumeFlags([]string{"lines", "--broker", addr, "--exit-at-end", "--print-key", "--print-offset", "--key-separator", "|"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	n, err := consumeRecords(ctx, c, co, w)
	w.Flush()
	if err != nil || n != lineCount+2 {
		t.Fatalf("consume: %d records, %v", n, err)
	}
	seen := map[string]bool{}
	nextOffset := map[string]int{}
	for line := range strings.Lines(out.String()) {
		line = strings.TrimSuffix(line, "\n")
		pos, rest, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("line without offset prefix: %q", line)
		}
		partition, offset, _ := strings.Cut(pos, ":")
		if want := fmt.Sprint(nextOffset[partition]); offset != want {
			t.Fatalf("partition %s: offset %s, want %s (order)", partition, offset, want)
		}
		nextOffset[partition]++
		key, _, _ := strings.Cut(rest, "|")
		if key != "" && fmt.Sprint(client.KeyPartition([]byte(key), partitions)) != partition {
			t.Errorf("key %q in partition %s, want %d", key, partition, client.KeyPartition([]byte(key), partitions))
		}
		seen[rest] = true
	}
	for i := range lineCount {
		if want := fmt.Sprintf("key-%d|value %d|with separator", i, i); !seen[want] {
			t.Fatalf("record %q not consumed", want)
		}
	}
	if !seen["|no separator here"] || !seen["|"] {
		t.Errorf("null-key records missing: %v %v", seen["|no separator here"], seen["|"])
	}

	// --partition, --from OFFSET and --max.
	co, _ = parseConsumeFlags([]string{"lines", "--partition", "2", "--from", "3", "--max", "2", "--print-offset"})
	out.Reset()
	w.Reset(&out)
	n, err = consumeRecords(ctx, c, co, w)
	w.Flush()
	if err != nil || n != 2 || !strings.HasPrefix(out.String(), "2:3\t") || !strings.Contains(out.String(), "\n2:4\t") {
		t.Errorf("--partition 2 --from 3 --max 2: %d %v %q", n, err, out.String())
	}
	// --from @future reads nothing and --exit-at-end returns at once.
	co, _ = parseConsumeFlags([]string{"lines", "--exit-at-end", "--from", fmt.Sprintf("@%d", time.Now().Add(time.Hour).UnixMilli())})
	if n, err = consumeRecords(ctx, c, co, bufio.NewWriter(io.Discard)); err != nil || n != 0 {
		t.Errorf("--from @future: %d %v", n, err)
	}
	// Offsets out of range and unknown partitions are errors.
	co, _ = parseConsumeFlags([]string{"lines", "--partition", "0", "--from", "100000000"})
	if _, err = consumeRecords(ctx, c, co, bufio.NewWriter(io.Discard)); !errors.Is(err, wire.ErrOffsetOutOfRange) {
		t.Errorf("--from beyond the end: %v", err)
	}
	co, _ = parseConsumeFlags([]string{"lines", "--partition", "9"})
	if _, err = consumeRecords(ctx, c, co, bufio.NewWriter(io.Discard)); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Errorf("--partition 9 of 4: %v", err)
	}
	co, _ = parseConsumeFlags([]string{"nosuch"})
	if _, err = consumeRecords(ctx, c, co, bufio.NewWriter(io.Discard)); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Errorf("unknown topic: %v", err)
	}
}

// TestConsumeExitAtEndIgnoresNewRecords: --exit-at-end stops at the high watermark seen
// at start even while a producer keeps appending.
func TestConsumeExitAtEndIgnoresNewRecords(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "grow", 1, nil); err != nil {
		t.Fatal(err)
	}
	produceTestRecords(t, c, "grow", 0, 100)
	co, _ := parseConsumeFlags([]string{"grow", "--exit-at-end"})
	stop := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		p := c.NewProducer(client.ProducerConfig{})
		defer func() { produced <- p.Close(ctx) }()
		for i := range 100_000 {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.Send(ctx, &client.Record{Topic: "grow", Partition: 0, Value: fmt.Appendf(nil, "late%d", i)}, nil); err != nil {
				return
			}
		}
	}()
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	n, err := consumeRecords(ctx, c, co, w)
	w.Flush()
	close(stop)
	if perr := <-produced; perr != nil {
		t.Errorf("background producer: %v", perr)
	}
	if err != nil || n != 100 || strings.Contains(out.String(), "late") {
		t.Errorf("exit-at-end: %d records, %v, late records printed: %v", n, err, strings.Contains(out.String(), "late"))
	}
}

func TestProduceErrors(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "small", 2, nil); err != nil {
		t.Fatal(err)
	}
	o, _ := parseProduceFlags([]string{"small", "--partition", "0", "--max-line-bytes", "100"})
	in := "short\n" + strings.Repeat("x", 200) + "\nafter\n"
	if _, err := produceLines(ctx, c, o, strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "line 2 is longer than --max-line-bytes 100") {
		t.Errorf("long line: %v", err)
	}
	o, _ = parseProduceFlags([]string{"nosuch"})
	if _, err := produceLines(ctx, c, o, strings.NewReader("a\n")); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Errorf("unknown topic: %v", err)
	}
	o, _ = parseProduceFlags([]string{"small", "--partition", "5"})
	if _, err := produceLines(ctx, c, o, strings.NewReader("a\n")); !errors.Is(err, wire.ErrUnknownTopicOrPartition) || !strings.Contains(err.Error(), "partition 5 of small: ") || !strings.Contains(err.Error(), "(topic has 2 partitions)") {
		t.Errorf("partition 5 of 2: %v (want the partition count, as consume says)", err)
	}
	// --partition puts every line on one partition; acks=0 still delivers.
	o, _ = parseProduceFlags([]string{"small", "--partition", "1", "--acks", "0"})
	if sum, err := produceLines(ctx, c, o, strings.NewReader("a\nb\nc\n")); err != nil || sum.records != 3 {
		t.Fatalf("acks=0: %+v %v", sum, err)
	}
	// acks=0 gets no answer; an acknowledged record sent after them on the same connection
	// proves they were processed (a connection's requests are handled in order).
	produceTestRecords(t, c, "small", 1, 1)
	co, _ := parseConsumeFlags([]string{"small", "--partition", "1", "--exit-at-end"})
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	if _, err := consumeRecords(ctx, c, co, w); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if out.String() != "a\nb\nc\nv0\n" {
		t.Errorf("consumed %q, want a b c v0", out.String())
	}
}

// BenchmarkProduceLines measures the CLI's stdin path (scan, split at the key separator,
// Send, acknowledgement) against the in-process broker with 100-byte lines.
func BenchmarkProduceLines(b *testing.B) {
	addr := startBroker(b)
	c, err := dial(context.Background(), addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(context.Background(), "bench", 2, nil); err != nil {
		b.Fatal(err)
	}
	line := []byte(strings.Repeat("k", 10) + "|" + strings.Repeat("v", 88) + "\n")
	o, err := parseProduceFlags([]string{"bench", "--key-separator", "|", "--acks", "1"})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	b.ResetTimer()
	sum, err := produceLines(context.Background(), c, o, &repeatReader{line: line, left: b.N})
	if err != nil || sum.records != int64(b.N) {
		b.Fatalf("%+v %v", sum, err)
	}
}

// repeatReader yields line left times.
type repeatReader struct {
	line []byte
	left int
	pos  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.left > 0 {
		k := copy(p[n:], r.line[r.pos:])
		n += k
		r.pos += k
		if r.pos == len(r.line) {
			r.pos = 0
			r.left--
		}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// TestProduceStreamsBoundedMemory feeds produce 96 MiB of stdin and checks, while stdin is
// still being read, that records are already acknowledged on the broker and that the heap
// stays far below the input size: produce streams instead of slurping stdin.
func TestProduceStreamsBoundedMemory(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "stream", 1, nil); err != nil {
		t.Fatal(err)
	}
	const inputBytes = 96 << 20
	// The input would not fit. What does: the 4 MiB producer buffer a few times over (open
	// and sealed batches, record bookkeeping) plus the in-process broker's request buffers;
	// about 30 MiB measured, independent of the input size.
	const heapGrowthMax = 48 << 20
	line := []byte(strings.Repeat("s", 1023) + "\n")
	checker := dialTest(t, addr)
	runtime.GC()
	var baseline runtime.MemStats
	runtime.ReadMemStats(&baseline)
	var checks, heapPeak int
	var visibleMidway int64 = -1
	r := &observedReader{
		inner: &repeatReader{line: line, left: inputBytes / len(line)},
		every: 8 << 20,
		observe: func(read int64) {
			// Live heap only: a collection first, so garbage from this and earlier tests
			// does not count.
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heapPeak = max(heapPeak, int(ms.HeapAlloc))
			checks++
			if read >= inputBytes/2 && visibleMidway < 0 {
				hw, err := checker.ListOffset(ctx, "stream", 0, wire.TimestampLatest)
				if err != nil {
					t.Errorf("high watermark midway: %v", err)
				}
				visibleMidway = hw
			}
		},
	}
	o, err := parseProduceFlags([]string{"stream", "--acks", "1", "--buffer-bytes", "4194304"})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := produceLines(ctx, c, o, r)
	if err != nil || sum.records != inputBytes/int64(len(line)) {
		t.Fatalf("produce: %+v %v", sum, err)
	}
	if visibleMidway <= 0 {
		t.Errorf("no record acknowledged after half of stdin was read (high watermark %d): stdin is not streamed", visibleMidway)
	}
	growth := heapPeak - int(baseline.HeapAlloc)
	if growth > heapGrowthMax {
		t.Errorf("live heap grew by %d MiB while producing %d MiB of stdin; want under %d MiB", growth>>20, inputBytes>>20, heapGrowthMax>>20)
	}
	t.Logf("%d checks, live heap %d MiB before, peak %d MiB, %d records visible at half of stdin", checks, baseline.HeapAlloc>>20, heapPeak>>20, visibleMidway)
}

// observedReader calls observe with the bytes read so far every `every` bytes.
type observedReader struct {
	inner   io.Reader
	every   int64
	read    int64
	next    int64
	observe func(read int64)
}

func (r *observedReader) Read(p []byte) (int, error) {
	n, err := r.inner.Read(p)
	r.read += int64(n)
	if r.read >= r.next {
		r.observe(r.read)
		r.next = r.read + r.every
	}
	return n, err
}

// BenchmarkConsumeRecords measures the consume path (fetch, decode, print with key and
// offset) against the in-process broker: b.N records of 100 bytes, read to the end.
func BenchmarkConsumeRecords(b *testing.B) {
	addr := startBroker(b)
	c, err := dial(context.Background(), addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", 2, nil); err != nil {
		b.Fatal(err)
	}
	line := []byte(strings.Repeat("k", 10) + "|" + strings.Repeat("v", 88) + "\n")
	o, err := parseProduceFlags([]string{"bench", "--key-separator", "|", "--acks", "1"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := produceLines(ctx, c, o, &repeatReader{line: line, left: b.N}); err != nil {
		b.Fatal(err)
	}
	co, err := parseConsumeFlags([]string{"bench", "--exit-at-end", "--print-key", "--print-offset"})
	if err != nil {
		b.Fatal(err)
	}
	out := bufio.NewWriterSize(io.Discard, 64<<10)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	b.ResetTimer()
	n, err := consumeRecords(ctx, c, co, out)
	if err != nil || n != int64(b.N) {
		b.Fatalf("consumed %d of %d: %v", n, b.N, err)
	}
}

// TestProduceLineLimitsMatchTheBroker: the CLI refuses a --max-line-bytes no broker
// request could carry, naming the broker's limit, and --partition beyond the broker's
// partition limit (both limits come from the packages the broker uses).
func TestProduceLineLimitsMatchTheBroker(t *testing.T) {
	_, err := parseProduceFlags([]string{"t", "--max-line-bytes", strconv.Itoa(64 << 20)})
	if err == nil || !strings.Contains(err.Error(), "--max-frame-bytes") {
		t.Fatalf("64 MiB lines: %v", err)
	}
	if _, err := parseProduceFlags([]string{"t", "--max-line-bytes", strconv.Itoa(lineBytesMaxLimit)}); err != nil {
		t.Fatalf("the largest allowed line: %v", err)
	}
	if _, err := parseProduceFlags([]string{"t", "--partition", strconv.Itoa(engine.PartitionsPerTopicMax)}); err == nil {
		t.Fatal("--partition at the broker's partition limit accepted")
	}
	if err := topicCreate("", []string{"t", "--partitions", strconv.Itoa(engine.PartitionsPerTopicMax + 1)}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), strconv.Itoa(engine.PartitionsPerTopicMax)) {
		t.Fatalf("--partitions above the broker's limit: %v", err)
	}
}
