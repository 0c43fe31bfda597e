package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
)

func TestCompileFormat(t *testing.T) {
	r := &client.ConsumedRecord{Topic: "orders", Partition: 3, Offset: 42, Timestamp: time.UnixMilli(1700000000123),
		Key: []byte("k1"), Value: []byte("hello"),
		Headers: []batch.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "nil"}}}
	null := &client.ConsumedRecord{Topic: "t", Timestamp: time.UnixMilli(0)}
	for _, tc := range []struct {
		format string
		record *client.ConsumedRecord
		want   string
	}{
		{`%t`, r, "orders"},
		{`%p`, r, "3"},
		{`%o`, r, "42"},
		{`%k`, r, "k1"},
		{`%s`, r, "hello"},
		{`%K`, r, "2"},
		{`%S`, r, "5"},
		{`%T`, r, "1700000000123"},
		{`%h`, r, "a=1,a=2,nil"},
		{`%%`, r, "%"},
		{`\n\r\t\\\0`, r, "\n\r\t\\\x00"},
		{`Topic %t [%p] at offset %o: key %k value %s (%K/%S bytes) ts %T headers %h\n`, r,
			"Topic orders [3] at offset 42: key k1 value hello (2/5 bytes) ts 1700000000123 headers a=1,a=2,nil\n"},
		{`[%k|%s|%K|%S|%h]`, null, "[||-1|-1|]"},
		{`100%% %s`, r, "100% hello"},
		{``, r, ""},
	} {
		parts, err := compileFormat(tc.format)
		if err != nil {
			t.Errorf("%q: %v", tc.format, err)
			continue
		}
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		writeFormatted(w, parts, tc.record)
		w.Flush()
		if out.String() != tc.want {
			t.Errorf("%q printed %q, want %q", tc.format, out.String(), tc.want)
		}
	}
	for format, want := range map[string]string{
		`%x`:     "unknown placeholder %x",
		`%`:      "% at the end",
		`abc\`:   `\ at the end`,
		`\q`:     `unknown escape \q`,
		`%s %R`:  "unknown placeholder %R",
		`%T\x41`: `unknown escape \x`,
	} {
		if _, err := compileFormat(format); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", format, err, want)
		}
	}
}

// consumeAll runs consume with args (plus --exit-at-end) and returns its output.
func consumeAll(t *testing.T, c *client.Client, args ...string) string {
	t.Helper()
	o, err := parseConsumeFlags(append(args, "--exit-at-end"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	if _, err := consumeRecords(context.Background(), c, o, w); err != nil {
		t.Fatalf("consume %q: %v", args, err)
	}
	w.Flush()
	return out.String()
}

// testRecords are produced with the client directly: binary and null keys and values,
// repeated and null headers, set timestamps.
var testRecords = []client.Record{
	{Key: []byte("text-key"), Value: []byte(`{"total":12} <&>`), Timestamp: time.UnixMilli(1700000000001),
		Headers: []batch.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "trace", Value: []byte("def")}}},
	{Key: []byte{0xff, 0x00, 0xfe}, Value: []byte{0x80, 'x', 0x00}, Timestamp: time.UnixMilli(1700000000002),
		Headers: []batch.RecordHeader{{Key: "bin", Value: []byte{0xc3, 0x28}}, {Key: "null"}}},
	{Key: nil, Value: nil, Timestamp: time.UnixMilli(1700000000003)},
	{Key: []byte(""), Value: []byte("ünïcödé\nline"), Timestamp: time.UnixMilli(1700000000004)},
}

func produceRecords(t *testing.T, c *client.Client, topic string, records []client.Record) {
	t.Helper()
	p := c.NewProducer(client.ProducerConfig{})
	defer p.Close(context.Background())
	for _, r := range records {
		r.Topic, r.Partition = topic, 0
		if _, err := p.SendSync(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
}

// --format json: one object per line that encoding/json parses, bytes as UTF-8 text when
// valid and base64 (marked) when not, null stays null, headers and timestamps kept.
func TestConsumeFormatJSON(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	if err := c.CreateTopic(context.Background(), "j", 1, nil); err != nil {
		t.Fatal(err)
	}
	produceRecords(t, c, "j", testRecords)
	out := consumeAll(t, c, "j", "--format", "json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(testRecords) {
		t.Fatalf("%d lines for %d records:\n%s", len(lines), len(testRecords), out)
	}
	type header struct {
		Key           string  `json:"key"`
		Value         *string `json:"value"`
		ValueEncoding string  `json:"value_encoding"`
	}
	type line struct {
		Topic         string   `json:"topic"`
		Partition     int32    `json:"partition"`
		Offset        int64    `json:"offset"`
		Timestamp     int64    `json:"timestamp"`
		Key           *string  `json:"key"`
		KeyEncoding   string   `json:"key_encoding"`
		Value         *string  `json:"value"`
		ValueEncoding string   `json:"value_encoding"`
		Headers       []header `json:"headers"`
	}
	decode := func(s *string, encoding string) []byte {
		switch {
		case s == nil:
			return nil
		case encoding == "base64":
			b, err := base64.StdEncoding.DecodeString(*s)
			if err != nil {
				t.Fatal(err)
			}
			return b
		case encoding == "utf8":
			return []byte(*s)
		}
		t.Fatalf("encoding %q", encoding)
		return nil
	}
	for i, text := range lines {
		var got line
		if err := json.Unmarshal([]byte(text), &got); err != nil {
			t.Fatalf("line %d does not parse: %v\n%s", i, err, text)
		}
		want := testRecords[i]
		if got.Topic != "j" || got.Partition != 0 || got.Offset != int64(i) || got.Timestamp != want.Timestamp.UnixMilli() {
			t.Errorf("line %d: %s/%d@%d ts %d", i, got.Topic, got.Partition, got.Offset, got.Timestamp)
		}
		if k := decode(got.Key, got.KeyEncoding); !bytes.Equal(k, want.Key) || (k == nil) != (want.Key == nil) {
			t.Errorf("line %d: key %q, want %q", i, k, want.Key)
		}
		if v := decode(got.Value, got.ValueEncoding); !bytes.Equal(v, want.Value) || (v == nil) != (want.Value == nil) {
			t.Errorf("line %d: value %q, want %q", i, v, want.Value)
		}
		if len(got.Headers) != len(want.Headers) {
			t.Fatalf("line %d: headers %+v, want %+v", i, got.Headers, want.Headers)
		}
		for h, wh := range want.Headers {
			gh := got.Headers[h]
			if v := decode(gh.Value, gh.ValueEncoding); gh.Key != wh.Key || !bytes.Equal(v, wh.Value) || (v == nil) != (wh.Value == nil) {
				t.Errorf("line %d header %d: %s=%q, want %s=%q", i, h, gh.Key, v, wh.Key, wh.Value)
			}
		}
	}
	// The markers as promised: base64 only for bytes that are not UTF-8; no HTML escaping.
	for _, want := range []string{`"key":"/wD+","key_encoding":"base64"`, `"value":"{\"total\":12} <&>","value_encoding":"utf8"`, `"key":null,"value":null,"headers":[]`, `{"key":"null","value":null}`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}

	// kcat-style --format with every placeholder, against the same records.
	out = consumeAll(t, c, "j", "--format", `%t|%p|%o|%K|%S|%T|%h|%k|%s\n`)
	want := "j|0|0|8|16|1700000000001|trace=abc,trace=def|text-key|{\"total\":12} <&>\n" +
		"j|0|1|3|3|1700000000002|bin=\xc3\x28,null|\xff\x00\xfe|\x80x\x00\n" +
		"j|0|2|-1|-1|1700000000003|||\n" +
		"j|0|3|0|16|1700000000004|||ünïcödé\nline\n"
	if out != want {
		t.Errorf("--format printed\n%q\nwant\n%q", out, want)
	}
}

// Headers from --header and from JSON lines survive produce -> broker -> consume, and
// consume --format json output produces back the same records (key, value, headers,
// timestamp, partition).
func TestProduceHeadersAndJSONInput(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	ctx := context.Background()
	for _, topic := range []string{"h", "copy", "in"} {
		if err := c.CreateTopic(ctx, topic, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	o, err := parseProduceFlags([]string{"h", "--partition", "1", "--key-separator", ",", "--header", "source=cli", "--header", "source=again", "--header", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := produceLines(ctx, c, o, strings.NewReader("k1,v1\nk2,v2\n")); err != nil {
		t.Fatal(err)
	}
	out := consumeAll(t, c, "h", "--format", `%k=%s [%h]\n`)
	if want := "k1=v1 [source=cli,source=again,empty=]\nk2=v2 [source=cli,source=again,empty=]\n"; out != want {
		t.Errorf("--header: consumed %q, want %q", out, want)
	}

	// JSON lines in: both header spellings, base64, null value, partition, timestamp; the
	// --header flag adds to each record's own headers.
	in := `{"key":"a","value":"1","headers":{"x":"1","y":null},"partition":0,"timestamp":1600000000000}

{"key":"/wA=","key_encoding":"base64","value":null,"headers":[{"key":"b","value":"AAE=","value_encoding":"base64"}],"partition":1}
{"value":"no key","topic":"ignored","offset":99}
`
	o, err = parseProduceFlags([]string{"in", "--input", "json", "--header", "via=json"})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := produceLines(ctx, c, o, strings.NewReader(in))
	if err != nil || sum.records != 3 {
		t.Fatalf("produce --input json: %+v %v", sum, err)
	}
	got := consumeAll(t, c, "in", "--partition", "0", "--format", `%T %k=%s [%h]\n`)
	if !strings.HasPrefix(got, "1600000000000 a=1 [x=1,y,via=json]\n") {
		t.Errorf("partition 0: %q", got)
	}
	got = consumeAll(t, c, "in", "--partition", "1", "--format", `%K %S [%h]\n`)
	if want := "2 -1 [b=\x00\x01,via=json]\n"; !strings.HasPrefix(got, want) {
		t.Errorf("partition 1: %q, want prefix %q", got, want)
	}
	if all := consumeAll(t, c, "in", "--format", `%k|%s\n`); !strings.Contains(all, "|no key\n") {
		t.Errorf("null-key record missing: %q", all)
	}

	// Round trip: consume --format json | produce --input json into another topic.
	produceRecords(t, c, "h", testRecords)
	exported := consumeAll(t, c, "h", "--format", "json")
	o, err = parseProduceFlags([]string{"copy", "--input", "json"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := produceLines(ctx, c, o, strings.NewReader(exported)); err != nil {
		t.Fatal(err)
	}
	copied := consumeAll(t, c, "copy", "--format", "json")
	normalize := func(s string) []string {
		var lines []string
		for l := range strings.Lines(s) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "topic")
			delete(m, "offset")
			b, _ := json.Marshal(m)
			lines = append(lines, string(b))
		}
		slices.Sort(lines)
		return lines
	}
	if a, b := normalize(exported), normalize(copied); !slices.Equal(a, b) {
		t.Errorf("round trip changed records:\n%s\n---\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}

func TestProduceJSONInputRefusals(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	if err := c.CreateTopic(context.Background(), "r", 1, nil); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"value":"a","colour":"red"}`:                                                `line 1: not a JSON record: json: unknown field "colour"`,
		"{\"value\":\"a\"}\nnot json":                                                 "line 2: not a JSON record",
		`{"value":"a"} {"value":"b"}`:                                                 "line 1: more than one JSON value",
		`{"value":"a","value_encoding":"hex"}`:                                        `line 1: value_encoding "hex": want utf8 or base64`,
		`{"key":"!!","key_encoding":"base64"}`:                                        "line 1: key: illegal base64",
		`{"value":null,"value_encoding":"base64"}`:                                    `line 1: value_encoding "base64" for a null value`,
		`{"value":"a","partition":-2}`:                                                "line 1: partition -2",
		`{"value":"a","timestamp":-5}`:                                                "line 1: timestamp -5",
		`{"value":"a","headers":[{"key":"h","value":"%","value_encoding":"base64"}]}`: `line 1: header "h": value: illegal base64`,
		`{"value":"a","headers":{"h":3}}`:                                             `line 1: not a JSON record: header "h"`,
	} {
		o, _ := parseProduceFlags([]string{"r", "--input", "json"})
		if _, err := produceLines(context.Background(), c, o, strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", in, err, want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"r", "--input", "xml"}, `--input "xml": want lines or json`},
		{[]string{"r", "--input", "json", "--key-separator", ","}, "--key-separator does not apply"},
		{[]string{"r", "--header", "novalue"}, "want key=value"},
		{[]string{"r", "--header", "=v"}, "want key=value"},
	} {
		if _, err := parseProduceFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"r", "--format", "%q"}, "unknown placeholder %q"},
		{[]string{"r", "--format", "%s", "--print-key"}, "--format replaces --print-key"},
	} {
		if _, err := parseConsumeFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestSplitGlobalFlags(t *testing.T) {
	defer func() { globalBroker = "" }()
	for _, tc := range []struct {
		args   []string
		rest   []string
		broker string
		help   bool
		err    string
	}{
		{args: []string{"topic", "list"}, rest: []string{"topic", "list"}},
		{args: []string{"--broker", "h:1", "topic", "list"}, rest: []string{"topic", "list"}, broker: "h:1"},
		{args: []string{"--broker=h:2", "consume", "t", "--broker", "x:1"}, rest: []string{"consume", "t", "--broker", "x:1"}, broker: "h:2"},
		{args: []string{"-broker", "h:3", "produce"}, rest: []string{"produce"}, broker: "h:3"},
		{args: []string{"--broker", "h:1,h:2", "--broker=h:3", "topic"}, rest: []string{"topic"}, broker: "h:1,h:2,h:3"},
		{args: []string{"--version"}, rest: []string{"version"}},
		{args: []string{"--help"}, rest: []string{}, help: true},
		{args: []string{"--broker"}, err: "--broker needs a value"},
		{args: []string{"--broker=", "topic"}, err: "empty address"},
		{args: []string{"--partition", "3", "consume"}, err: `unknown global flag "--partition"`},
		{args: []string{"--", "topic"}, rest: []string{"topic"}},
	} {
		globalBroker = ""
		rest, help, err := splitGlobalFlags(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(rest, tc.rest) || help != tc.help || globalBroker != tc.broker {
			t.Errorf("%q: rest %q help %v broker %q err %v; want %q %v %q", tc.args, rest, help, globalBroker, err, tc.rest, tc.help, tc.broker)
		}
	}
}

// `ringlog --broker HOST:PORT topic ...` reaches that broker; a --broker after the command
// wins over one before it; unknown global flags are a usage error (exit 2).
func TestGlobalBrokerFlag(t *testing.T) {
	defer func() { globalBroker = "" }()
	t.Setenv(brokerEnv, "127.0.0.1:1") // nothing listens there
	addr := startBroker(t)
	c := dialTest(t, addr)
	var stderr bytes.Buffer
	if code := runCLI([]string{"--broker", addr, "topic", "create", "global", "--partitions", "2"}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if n, err := c.Partitions(context.Background(), "global"); err != nil || n != 2 {
		t.Errorf("topic made through the global --broker: %d partitions, %v", n, err)
	}
	globalBroker = ""
	if code := runCLI([]string{"--broker", "127.0.0.1:1", "topic", "delete", "global", "--broker", addr}, &stderr); code != 0 {
		t.Errorf("--broker after the command did not win: exit %d: %s", code, stderr.String())
	}
	globalBroker = ""
	stderr.Reset()
	if code := runCLI([]string{"--bogus", "topic", "list"}, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown global flag "--bogus"`) {
		t.Errorf("unknown global flag: exit %d: %s", code, stderr.String())
	}
}

// The bash script completes commands, subcommands, flags (read from the commands' own flag
// sets) and enumerated values; the zsh script is valid zsh where zsh is installed.
func TestCompletion(t *testing.T) {
	var script bytes.Buffer
	if err := runCompletion([]string{"bash"}, &script); err != nil {
		t.Fatal(err)
	}
	spec := completionSpec()
	for _, key := range []string{"produce", "consume", "topic create", "topic config"} {
		if len(spec.flags[key]) < 2 || !slices.Contains(spec.flags[key], "--broker") {
			t.Errorf("flags of %s: %v", key, spec.flags[key])
		}
	}
	for _, f := range []string{"--format", "--max", "--exit-at-end"} {
		if !slices.Contains(spec.flags["consume"], f) {
			t.Errorf("consume flags lack %s: %v", f, spec.flags["consume"])
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	path := dir + "/ringlog.bash"
	if err := os.WriteFile(path, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]string{
		"ringlog con":                           "consume",
		"ringlog ":                              "--broker --help acl bench cluster completion consume group partition produce top topic tune user version",
		"ringlog acl ":                          "add list remove",
		"ringlog user add --pass":               "--password-file",
		"ringlog group ":                        "delete describe list reset",
		"ringlog group reset g --to":            "--to --topic",
		"ringlog cluster ":                      "describe finalize-version",
		"ringlog cluster describe --j":          "--json",
		"ringlog --broker h:1 topi":             "topic",
		"ringlog topic ":                        "config create delete describe list repair",
		"ringlog topic create orders --par":     "--partitions",
		"ringlog produce orders --acks ":        "0 1 all",
		"ringlog produce orders --in":           "--input",
		"ringlog produce orders --input ":       "json lines",
		"ringlog produce orders --hea":          "--header",
		"ringlog consume orders --for":          "--format",
		"ringlog consume orders --format j":     "json",
		"ringlog consume orders --from ":        "earliest latest",
		"ringlog completion ":                   "bash zsh",
		"ringlog partition ":                    "elect-leader reassign",
		"ringlog partition reassign t --rep":    "--replicas",
		"ringlog --broker h:1 consume t --exit": "--exit-at-end",
		"ringlog tune plan --for":               "--format",
		"ringlog bench run --dri":               "--driver",
		"ringlog top --int":                     "--interval",
	} {
		words := strings.Split(line, " ")
		cmd := exec.Command("bash", "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($#-1)); _ringlog; printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '`, "bash", path)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v %s", line, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("%q completes to %q, want %q", line, got, want)
		}
	}
	script.Reset()
	if err := runCompletion([]string{"zsh"}, &script); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(script.String(), "#compdef ringlog\n") || !strings.Contains(script.String(), "--partitions") {
		t.Errorf("zsh script:\n%s", script.String())
	}
	if err := runCompletion([]string{"fish"}, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown shell "fish"`) {
		t.Errorf("fish: %v", err)
	}
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Log("zsh not installed: zsh script syntax not checked")
		return
	}
	os.WriteFile(dir+"/_ringlog", script.Bytes(), 0o644)
	if out, err := exec.Command("zsh", "-n", dir+"/_ringlog").CombinedOutput(); err != nil {
		t.Errorf("zsh -n: %v %s", err, out)
	}
}

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	Version, Commit = "v1.2.3", "abcdef"
	defer func() { Version, Commit = "0.1.0-dev", "unknown" }()
	printVersion(&out)
	if !strings.HasPrefix(out.String(), "ringlog v1.2.3 (commit abcdef, go") {
		t.Errorf("version: %q", out.String())
	}
	if err := commands["version"].run([]string{"extra"}); err == nil {
		t.Error("version with an argument: no error")
	}
}

// BenchmarkWriteRecordFormats measures printing one 100-byte record with a kcat --format
// and with --format json (no broker: the formatting alone).
func BenchmarkWriteRecordFormats(b *testing.B) {
	r := &client.ConsumedRecord{Topic: "bench", Partition: 1, Offset: 123456, Timestamp: time.UnixMilli(1700000000000),
		Key: []byte(strings.Repeat("k", 10)), Value: []byte(strings.Repeat("v", 90)),
		Headers: []batch.RecordHeader{{Key: "trace", Value: []byte("abc")}}}
	parts, err := compileFormat(`%t %p %o %T %k %s %h\n`)
	if err != nil {
		b.Fatal(err)
	}
	out := bufio.NewWriterSize(io.Discard, 64<<10)
	b.Run("kcat", func(b *testing.B) {
		b.SetBytes(int64(len(r.Key) + len(r.Value)))
		b.ReportAllocs()
		for range b.N {
			writeFormatted(out, parts, r)
		}
	})
	b.Run("json", func(b *testing.B) {
		enc := newJSONEncoder(out)
		b.SetBytes(int64(len(r.Key) + len(r.Value)))
		b.ReportAllocs()
		for range b.N {
			if err := enc.Encode(newJSONRecord(r)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEveryCommandHelp: -h on every command and subcommand succeeds (exit 0) without an
// error line. `bench SUB -h`, `tune SUB -h`, `top -h` and `version -h` exited 1 until
// session 16 ("flag: help requested", "unexpected argument").
func TestEveryCommandHelp(t *testing.T) {
	var usage bytes.Buffer
	usageOutput = &usage
	defer func() { usageOutput = os.Stderr }()
	spec := completionSpec()
	for _, cmd := range spec.commands {
		lines := [][]string{{cmd, "-h"}}
		if cmd != "completion" { // its "subcommands" are shells: completion bash prints a script
			for _, sub := range spec.subcommands[cmd] {
				lines = append(lines, []string{cmd, sub, "-h"})
			}
		}
		for _, args := range lines {
			var stderr bytes.Buffer
			if code := runCLI(args, &stderr); code != 0 || stderr.Len() != 0 {
				t.Errorf("ringlog %s: exit %d, %q", strings.Join(args, " "), code, stderr.String())
			}
		}
	}
}
