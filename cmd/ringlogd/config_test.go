package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ringlog/ringlog/engine"
)

// envOf returns a getenv over a fixed map.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ringlogd.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Precedence: flag > env > file > default, per key, topic-defaults replaced whole.
func TestConfigPrecedence(t *testing.T) {
	path := writeConfig(t, `
listen: 127.0.0.1:9500
shards: 3
log-level: warn
storage: direct
topic-defaults:
  retention.ms: "1000"
  segment.bytes: "1048576"
`)
	env := envOf(map[string]string{
		"RINGLOG_SHARDS":         "5",
		"RINGLOG_LOG_LEVEL":      "error",
		"RINGLOG_TOPIC_DEFAULTS": "retention.ms=2000",
		"RINGLOG_BROKER":         "ignored:1", // the CLI's variable: not a ringlogd key, ignored
	})
	s, err := loadSettings([]string{"--config", path, "--log-level", "debug"}, env)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]struct{ value, source string }{
		"listen":         {"127.0.0.1:9500", "file " + path + ":2"},
		"shards":         {"5", "env RINGLOG_SHARDS"},
		"log-level":      {"debug", "flag"},
		"storage":        {"direct", "file " + path + ":5"},
		"topic-defaults": {"retention.ms=2000", "env RINGLOG_TOPIC_DEFAULTS"},
		"data":           {"./data", "default"},
	} {
		if got, src := s.value(key), s.sources[key].String(); got != want.value || src != want.source {
			t.Errorf("%s = %q from %q, want %q from %q", key, got, src, want.value, want.source)
		}
	}
	lc, err := s.logDefaultsOver(engine.LogConfig{})
	if err != nil || lc.RetentionMs != 2000 || lc.SegmentBytes != 0 || lc.Storage != engine.StorageDirect {
		t.Errorf("logDefaults = %+v, %v; want retention 2000, segment bytes from the engine, direct", lc, err)
	}
	// $RINGLOG_CONFIG names the file when --config does not.
	s, err = loadSettings(nil, envOf(map[string]string{"RINGLOG_CONFIG": path}))
	if err != nil || s.o.shards != 3 || s.o.listen != "127.0.0.1:9500" {
		t.Errorf("RINGLOG_CONFIG: %+v %v", s, err)
	}
	// An empty file means defaults.
	if s, err = loadSettings([]string{"--config", writeConfig(t, "# nothing\n")}, noEnv); err != nil || s.o.listen != "127.0.0.1:9400" {
		t.Errorf("empty file: %v", err)
	}
}

// Every refusal names the key and where it was set, and is of the right kind.
func TestConfigRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		file string
		args []string
		env  map[string]string
		kind error
		want string // in the message; FILE stands for the file's path
	}{
		"unknown key":            {file: "listen: a:1\nlistne: b:2\n", kind: ErrUnknownKey, want: `FILE:2: unknown key "listne" (did you mean "listen"?)`},
		"kafka-style key":        {file: "max_connections: 10\n", kind: ErrUnknownKey, want: `FILE:1: unknown key "max_connections" (did you mean "max-connections"?)`},
		"command-only key":       {file: "config: other.yaml\n", kind: ErrUnknownKey, want: `FILE:1: unknown key "config"`},
		"unknown topic default":  {file: "topic-defaults:\n  retention.hours: \"1\"\n", kind: ErrUnknownKey, want: "FILE:2: unknown key topic-defaults.retention.hours"},
		"per-topic-only default": {file: "topic-defaults:\n  min.insync.replicas: \"2\"\n", kind: ErrUnknownKey, want: "topic-defaults.min.insync.replicas"},
		"unknown default in env": {env: map[string]string{"RINGLOG_TOPIC_DEFAULTS": "nope=1"}, kind: ErrUnknownKey, want: `RINGLOG_TOPIC_DEFAULTS: unknown topic config "nope"`},
		"bad integer in file":    {file: "shards: many\n", kind: ErrBadValue, want: `FILE:1: shards "many": want an integer`},
		"bad bool in file":       {file: "pin: yes please\n", kind: ErrBadValue, want: `FILE:1: pin "yes please": want true or false`},
		"bad duration in env":    {env: map[string]string{"RINGLOG_SHUTDOWN_GRACE": "10"}, kind: ErrBadValue, want: `RINGLOG_SHUTDOWN_GRACE "10": want a duration`},
		"bad enum in file":       {file: "\nstorage: dirct\n", kind: ErrBadValue, want: `FILE:2: storage "dirct": want page-cache, direct`},
		"bad enum flag":          {args: []string{"--io", "epoll"}, kind: ErrBadValue, want: `--io "epoll": want auto, uring, syscall`},
		"bad log level":          {env: map[string]string{"RINGLOG_LOG_LEVEL": "loud"}, kind: ErrBadValue, want: `RINGLOG_LOG_LEVEL "loud"`},
		"negative shards":        {args: []string{"--shards", "-1"}, kind: ErrBadValue, want: `--shards "-1"`},
		"frame size over u32":    {file: "max-frame-bytes: 4294967296\n", kind: ErrBadValue, want: "FILE:1: max-frame-bytes"},
		"zero connections":       {file: "max-connections: 0\n", kind: ErrBadValue, want: "FILE:1: max-connections"},
		"listen without port":    {file: "listen: localhost\n", kind: ErrBadValue, want: `FILE:1: listen "localhost": want HOST:PORT`},
		"bad shard ports":        {file: "shard-ports: 70000\n", kind: ErrBadValue, want: "FILE:1: shard-ports"},
		"bad cpu list":           {file: "cpus: 3-1\n", kind: ErrBadValue, want: "FILE:1: cpus"},
		"list for a value":       {file: "listen:\n  - a:1\n  - b:2\n", kind: ErrBadValue, want: "FILE:1: listen: want a single value, not a list"},
		"mapping for a value":    {file: "data: {a: b}\n", kind: ErrBadValue, want: "FILE:1: data: want a single value, not a mapping"},
		"topic defaults not map": {file: "topic-defaults: retention.ms=1\n", kind: ErrBadValue, want: "FILE:1: topic-defaults: want a mapping"},
		"invalid topic default":  {file: "topic-defaults:\n  segment.bytes: \"10\"\n", kind: ErrBadValue, want: "FILE:1: topic-defaults: "},
		"not a mapping":          {file: "- listen\n", kind: ErrBadValue, want: "FILE:1: want a mapping"},
		"two documents":          {file: "listen: a:1\n---\nlisten: b:1\n", kind: ErrBadValue, want: "want one YAML document"},
		"yaml syntax":            {file: "listen: [a\n", kind: ErrBadValue, want: "config file FILE: yaml:"},
		"repeated key":           {file: "shards: 1\npin: true\nshards: 2\n", kind: ErrConflict, want: `FILE:3: key "shards" is already set on line 1`},
		"repeated topic default": {file: "topic-defaults:\n  retention.ms: \"1\"\n  retention.ms: \"2\"\n", kind: ErrConflict, want: "FILE:3: key topic-defaults.retention.ms is already set on line 2"},
		"cpus and tune-plan":     {file: "cpus: 0-1\n", args: []string{"--tune-plan", "plan.json"}, kind: ErrConflict, want: "FILE:1: cpus and --tune-plan cannot both be set"},
		"flush-always twice":     {file: "flush-always: true\ntopic-defaults:\n  flush.always: \"false\"\n", kind: ErrConflict, want: "FILE:1: flush-always and FILE:2: topic-defaults.flush.always set the same default"},
		"storage twice":          {env: map[string]string{"RINGLOG_STORAGE": "direct", "RINGLOG_TOPIC_DEFAULTS": "storage.mode=direct"}, kind: ErrConflict, want: "RINGLOG_STORAGE and RINGLOG_TOPIC_DEFAULTS.storage.mode"},
		"missing file":           {args: []string{"--config", "/nonexistent/ringlogd.yaml"}, want: "config file: open /nonexistent/ringlogd.yaml"},
		"cluster tls without peer ca": {args: []string{"--node-id", "1", "--controller-voters", "1@127.0.0.1:9500", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
			kind: ErrConflict, want: "give --inter-broker-tls-ca"},
		"cluster auth without login": {args: []string{"--node-id", "1", "--controller-voters", "1@127.0.0.1:9500", "--auth", "required"},
			kind: ErrConflict, want: "give --inter-broker-credentials-file"},
		"peer ca without tls":       {args: []string{"--inter-broker-tls-ca", "ca.pem"}, kind: ErrConflict, want: "--inter-broker-tls-ca needs --tls-cert"},
		"bad peer mechanism":        {args: []string{"--inter-broker-sasl-mechanism", "PLAIN"}, kind: ErrConflict, want: "--inter-broker-sasl-mechanism"},
		"unexpected argument":       {args: []string{"serve"}, want: `unexpected argument "serve"`},
		"unknown flag":              {args: []string{"--listne", "a:1"}, want: `flag provided but not defined: -listne (did you mean "listen"?); ringlogd --help lists the flags`},
		"kafka-style flag":          {args: []string{"--max_connections", "10"}, want: `-max_connections (did you mean "max-connections"?)`},
		"bad topic-defaults flag":   {args: []string{"--topic-defaults", "retention.ms"}, want: "want key=value"},
		"too many write groups":     {args: []string{"--direct-write-groups", "9"}, want: "direct-write-groups"},
		"retention check too often": {args: []string{"--retention-check-interval", "1ms"}, want: "retention-check-interval"},
	} {
		t.Run(name, func(t *testing.T) {
			args := tc.args
			path := ""
			if tc.file != "" {
				path = writeConfig(t, tc.file)
				args = append([]string{"--config", path}, args...)
			}
			_, err := loadSettings(args, envOf(tc.env))
			want := strings.ReplaceAll(tc.want, "FILE", path)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, want)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.kind)
			}
		})
	}
}

// The example in docs/ sets every key, comments every key, loads, and round-trips through
// --print-config: printing it and loading the output gives the same configuration.
func TestExampleConfigRoundTrip(t *testing.T) {
	example := filepath.Join("..", "..", "docs", "ringlogd.example.yaml")
	s, err := loadSettings([]string{"--config", example}, noEnv)
	if err != nil {
		t.Fatalf("load the example: %v", err)
	}
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	commented := map[string]bool{}
	root := doc.Content[0]
	for i := 0; i < len(root.Content); i += 2 {
		commented[root.Content[i].Value] = strings.TrimSpace(root.Content[i].HeadComment) != ""
	}
	for _, key := range s.keys() {
		if src := s.sources[key]; src.kind != sourceFile {
			t.Errorf("example does not set %s (source %s)", key, src)
		}
		if !commented[key] {
			t.Errorf("example has no comment above %s", key)
		}
	}

	var printed bytes.Buffer
	if err := s.writeConfig(&printed); err != nil {
		t.Fatal(err)
	}
	dataLine := 1 + strings.Count(string(data[:strings.Index(string(data), "\ndata: ")+1]), "\n")
	if !strings.Contains(printed.String(), fmt.Sprintf("data: /var/lib/ringlog # file %s:%d\n", example, dataLine)) {
		t.Errorf("print-config does not name the file and line of data:\n%s", printed.String())
	}
	again, err := loadSettings([]string{"--config", writeConfig(t, printed.String())}, noEnv)
	if err != nil {
		t.Fatalf("load --print-config output: %v\n%s", err, printed.String())
	}
	if !reflect.DeepEqual(s.o, again.o) {
		t.Errorf("round trip changed the configuration:\n%+v\n%+v", s.o, again.o)
	}
	var reprinted bytes.Buffer
	if err := again.writeConfig(&reprinted); err != nil {
		t.Fatal(err)
	}
	if withoutComments(t, printed.String()) != withoutComments(t, reprinted.String()) {
		t.Errorf("print-config of the printed config differs:\n%s\n---\n%s", printed.String(), reprinted.String())
	}
}

// withoutComments re-encodes YAML text without its comments.
func withoutComments(t *testing.T, text string) string {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// Defaults print as a loadable file: every key, source "default".
func TestPrintConfigDefaults(t *testing.T) {
	s, err := loadSettings(nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.writeConfig(&out); err != nil {
		t.Fatal(err)
	}
	for _, key := range s.keys() {
		if !strings.Contains(out.String(), "\n"+key+": ") {
			t.Errorf("print-config lacks %s:\n%s", key, out.String())
		}
	}
	if n := strings.Count(out.String(), "# default"); n != len(s.keys()) {
		t.Errorf("%d values marked default, want %d:\n%s", n, len(s.keys()), out.String())
	}
}

type fakeBroker struct {
	calls    []engine.LogConfig
	topics   []string
	err      error
	received chan struct{}
}

func (f *fakeBroker) SetLogDefaults(lc engine.LogConfig) ([]string, error) {
	f.calls = append(f.calls, lc)
	return f.topics, f.err
}

// reload applies log-level and topic defaults, reports keys that need a restart, and keeps
// the running configuration when the new one is refused.
func TestReload(t *testing.T) {
	path := writeConfig(t, "log-level: info\nlisten: 127.0.0.1:9500\ntopic-defaults:\n  retention.ms: \"1000\"\n")
	args := []string{"--config", path}
	running, err := loadSettings(args, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	level := new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))
	b := &fakeBroker{topics: []string{"orders"}}

	// Nothing changed.
	if got := reload(running, args, noEnv, b, engine.LogConfig{}, level, log); got != running || len(b.calls) != 0 {
		t.Errorf("unchanged file: new settings or broker called (%d calls)", len(b.calls))
	}
	if !strings.Contains(logs.String(), "nothing to change") {
		t.Errorf("unchanged reload not logged: %s", logs.String())
	}

	// log level, a topic default, and listen (restart only).
	logs.Reset()
	os.WriteFile(path, []byte("log-level: debug\nlisten: 127.0.0.1:9600\ntopic-defaults:\n  retention.ms: \"2000\"\n"), 0o644)
	next := reload(running, args, noEnv, b, engine.LogConfig{VerifySegments: true}, level, log)
	if level.Level() != slog.LevelDebug {
		t.Errorf("level %v after reload, want debug", level.Level())
	}
	if len(b.calls) != 1 || b.calls[0].RetentionMs != 2000 || !b.calls[0].VerifySegments {
		t.Errorf("SetLogDefaults calls %+v, want one with retention 2000 over the process-wide base", b.calls)
	}
	if next.o.listen != "127.0.0.1:9500" || next.o.logLevel != "debug" || next.o.topicDefaults["retention.ms"] != "2000" {
		t.Errorf("running configuration after reload: %+v", next.o)
	}
	for _, want := range []string{`msg="configuration changes need a restart and were not applied" keys=listen`,
		`msg="configuration reloaded" changed=log-level,topic-defaults log_level=debug topic_defaults="retention.ms=2000"`,
		"topics_reconfigured=orders", `msg="configuration in force"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	// A broken file changes nothing.
	logs.Reset()
	os.WriteFile(path, []byte("log-level: info\nlog-levle: x\n"), 0o644)
	if got := reload(next, args, noEnv, b, engine.LogConfig{}, level, log); got != next || level.Level() != slog.LevelDebug || len(b.calls) != 1 {
		t.Error("a refused configuration was applied")
	}
	if !strings.Contains(logs.String(), `configuration reload failed; the running configuration stays" err="`+path+`:2: unknown key \"log-levle\"`) {
		t.Errorf("refused reload not logged with the key: %s", logs.String())
	}

	// The broker refusing the new defaults keeps the running ones.
	logs.Reset()
	b.err, b.topics = engine.ErrTopicExists, nil
	os.WriteFile(path, []byte("log-level: debug\nlisten: 127.0.0.1:9500\ntopic-defaults:\n  retention.ms: \"3000\"\n"), 0o644)
	if got := reload(next, args, noEnv, b, engine.LogConfig{}, level, log); got != next {
		t.Error("defaults the broker refused became the running configuration")
	}
}

// FuzzConfigFile: any file content either loads or is refused with an error (never a
// panic), and a loaded configuration prints (--print-config) as a file that loads back
// to the same options. Besides the hand-made seeds, every key with its default value is
// a seed of one line (random bytes almost never spell a key, so without them the values
// of most keys were never parsed), and each input goes to the same two files of the
// fuzzing process, not a new temporary directory per input (which made it ~100 inputs a
// second).
func FuzzConfigFile(f *testing.F) {
	for _, seed := range []string{
		"listen: 127.0.0.1:9500\nshards: 3\ntopic-defaults:\n  retention.ms: \"1000\"\n",
		"topic-defaults: {}\n", "# empty\n", "", "---\n", "a: &x 1\nshards: *x\n", "- 1\n",
		"shards: 1\nshards: 2\n", "data: {a: b}\n", "log-level: DEBUG\n", "max-frame-bytes: 0x10\n",
		"cpus: 0-1\ntune-plan: p\n", "listen: a:1\n---\nlisten: b:2\n", "pin: !!str true\n",
	} {
		f.Add(seed)
	}
	defaults, err := loadSettings(nil, noEnv)
	if err != nil {
		f.Fatal(err)
	}
	var printed bytes.Buffer
	if err := defaults.writeConfig(&printed); err != nil {
		f.Fatal(err)
	}
	for line := range strings.Lines(printed.String()) {
		if value, _, _ := strings.Cut(line, " # "); !strings.HasPrefix(line, "#") {
			f.Add(value + "\n")
		}
	}
	dir := f.TempDir()
	file, printedFile := filepath.Join(dir, "in.yaml"), filepath.Join(dir, "printed.yaml")
	f.Fuzz(func(t *testing.T, text string) {
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := loadSettings([]string{"--config", file}, noEnv)
		if err != nil {
			return
		}
		var printed bytes.Buffer
		if err := s.writeConfig(&printed); err != nil {
			t.Fatalf("print: %v", err)
		}
		if err := os.WriteFile(printedFile, printed.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := loadSettings([]string{"--config", printedFile}, noEnv)
		if err != nil {
			t.Fatalf("%q loaded, but its --print-config does not: %v\n%s", text, err, printed.String())
		}
		if !reflect.DeepEqual(s.o, again.o) {
			t.Fatalf("%q: round trip changed the configuration:\n%+v\n%+v", text, s.o, again.o)
		}
	})
}

// TestFlagUsageValueNames: --help shows each flag's value as one word. Go's flag package
// takes a `quoted` part of the usage as the value's name: --help printed "-tune-plan
// ringlog tune plan --format json" until session 16.
func TestFlagUsageValueNames(t *testing.T) {
	_, fs := ringlogdCLI()
	fs.VisitAll(func(f *flag.Flag) {
		if name, _ := flag.UnquoteUsage(f); strings.ContainsAny(name, " \t") {
			t.Errorf("--help shows -%s %s", f.Name, name)
		}
	})
}
