package main

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// These tests run the real ringlogd binary, built once by TestMain with version and commit
// set by -ldflags -X as `make release` sets them (TestReleaseBuild runs make release).

const (
	testVersion      = "v9.9.9-test"
	testCommit       = "0123abc"
	processWaitMax   = 60 * time.Second // a loaded 2-core box can be slow to exec and start
	processLogLines  = 10000
	processStopGrace = 30 * time.Second
)

var ringlogdBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ringlogd-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ringlogdBin = filepath.Join(dir, "ringlogd")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.Version="+testVersion+" -X main.Commit="+testCommit, "-o", ringlogdBin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build ringlogd: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// --version prints what -ldflags set.
func TestVersionFlag(t *testing.T) {
	out, err := exec.Command(ringlogdBin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := regexp.MustCompile(`^ringlogd ` + testVersion + ` \(commit ` + testCommit + `, go1\.\d+.*, linux/(amd64|arm64)\)\n$`); !want.Match(out) {
		t.Errorf("--version printed %q", out)
	}
}

// make release for this machine's architecture, into a temp DIST: static binaries that
// print the VERSION and COMMIT given, a tarball with the docs and deploy/, SHA256SUMS.
// The first run on a machine rebuilds the standard library without cgo (minutes on a
// small box); later runs hit the build cache.
func TestReleaseBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dist := t.TempDir()
	arch := runtime.GOARCH
	cmd := exec.Command("make", "-C", filepath.Join("..", ".."), "release", "DIST="+dist, "RELEASE_PLATFORMS=linux/"+arch, "VERSION=v7.7.7", "COMMIT=feedface")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	dir := filepath.Join(dist, "ringlog-v7.7.7-linux-"+arch)
	for bin, want := range map[string]string{"ringlogd": "ringlogd v7.7.7 (commit feedface, ", "ringlog": "ringlog v7.7.7 (commit feedface, "} {
		path := filepath.Join(dir, bin)
		args := []string{"--version"}
		if bin == "ringlog" {
			args = []string{"version"}
		}
		out, err := exec.Command(path, args...).Output()
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%s %v: %q %v, want %q...", bin, args, out, err, want)
		}
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: dynamically linked", bin)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", bin, libs)
		}
		f.Close()
	}
	for _, name := range []string{"ringlogd.example.yaml", "operations.md", "deploy/systemd/ringlogd.service"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("release lacks %s: %v", name, err)
		}
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil || !strings.Contains(string(sums), "ringlog-v7.7.7-linux-"+arch+".tar.gz") {
		t.Errorf("SHA256SUMS: %q %v", sums, err)
	}
}

// --print-config on the binary: the environment wins over the file, and the output says so.
func TestPrintConfigBinary(t *testing.T) {
	cmd := exec.Command(ringlogdBin, "--config", filepath.Join("..", "..", "docs", "ringlogd.example.yaml"), "--print-config", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "RINGLOG_SHARDS=2")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"shards: 2 # env RINGLOG_SHARDS\n", "log-level: warn # flag\n", "data: /var/lib/ringlog # file ../../docs/ringlogd.example.yaml:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("print-config lacks %q:\n%s", want, out)
		}
	}
	// A refused file: exit 1, one line naming the key.
	bad := writeConfig(t, "shards: 2\nshard: 3\n")
	out, err = exec.Command(ringlogdBin, "--config", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), bad+`:2: unknown key "shard" (did you mean "shards"?)`) {
		t.Errorf("bad config: %v %q", err, out)
	}
}

// process is a ringlogd child whose stderr lines arrive on a channel.
type process struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	log   []string // guarded by mu: every line so far
	done  chan error
}

func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{t: t, cmd: exec.Command(ringlogdBin, args...), lines: make(chan string, processLogLines), done: make(chan error, 1)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("ringlogd log:\n%s", strings.Join(p.log, "\n"))
			p.mu.Unlock()
		}
	})
	return p
}

// waitFor returns the next line containing want, failing the test after processWaitMax.
// Lines before it are returned too, in order.
func (p *process) waitFor(want string) (line string, before []string) {
	p.t.Helper()
	timer := time.NewTimer(processWaitMax)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("ringlogd exited before logging %q", want)
			}
			if strings.Contains(l, want) {
				return l, before
			}
			before = append(before, l)
		case <-timer.C:
			p.t.Fatalf("no %q logged within %s", want, processWaitMax)
		}
	}
}

// startedClient waits for the start-up line and returns a client of the listen address it
// names.
func (p *process) startedClient() *client.Client {
	p.t.Helper()
	started, _ := p.waitFor(`msg="ringlogd started"`)
	addr := regexp.MustCompile(`listen=(\S+)`).FindStringSubmatch(started)
	if addr == nil {
		p.t.Fatalf("no listen address in %q", started)
	}
	c, err := client.New(context.Background(), client.Config{Broker: addr[1], DialTimeout: 10 * time.Second})
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

func (p *process) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// SIGHUP on a real ringlogd: log level and topic defaults change while it serves, keys
// that need a restart are reported, a broken file is refused and the broker keeps going.
func TestSighupReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ringlogd.yaml")
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := "data: " + filepath.Join(dir, "data") + "\nlisten: 127.0.0.1:0\nadmin: 127.0.0.1:0\nshards: 1\nshard-ports: \"off\"\npin: false\n"
	write(base + "log-level: info\ntopic-defaults:\n  retention.ms: \"1000000\"\n")
	p := startProcess(t, "--config", path)
	ctx := context.Background()
	c := p.startedClient()
	defer c.Close()
	if err := c.CreateTopic(ctx, "orders", 1, nil); err != nil {
		t.Fatal(err)
	}
	retention := func() (string, int8) {
		t.Helper()
		configs, err := c.DescribeConfigs(ctx, "orders", "retention.ms")
		if err != nil || len(configs) != 1 {
			t.Fatalf("describe configs: %v %v", configs, err)
		}
		return configs[0].Value, configs[0].Source
	}
	if v, src := retention(); v != "1000000" || src != wire.ConfigSourceBroker {
		t.Fatalf("retention.ms %s (source %d) at start, want 1000000 from the broker", v, src)
	}

	write(base + "log-level: debug\ntopic-defaults:\n  retention.ms: \"2000000\"\n  flush.always: \"true\"\n")
	p.signal(syscall.SIGHUP)
	line, _ := p.waitFor(`msg="configuration reloaded"`)
	for _, want := range []string{"changed=log-level,topic-defaults", "log_level=debug", "topics_reconfigured=__consumer_offsets,orders"} {
		if !strings.Contains(line, want) {
			t.Errorf("reload line lacks %q: %s", want, line)
		}
	}
	p.waitFor(`level=DEBUG msg="configuration in force"`) // the new level is in force
	if v, _ := retention(); v != "2000000" {
		t.Errorf("retention.ms %s after reload, want 2000000", v)
	}
	prod := c.NewProducer(client.ProducerConfig{})
	if _, err := prod.SendSync(ctx, &client.Record{Topic: "orders", Partition: 0, Value: []byte("after reload")}); err != nil {
		t.Errorf("produce after the partition was reopened: %v", err)
	}
	prod.Close(ctx)

	// A key that needs a restart, and a broken file.
	write(strings.Replace(base, "listen: 127.0.0.1:0", "listen: 127.0.0.1:1", 1) + "log-level: debug\ntopic-defaults:\n  retention.ms: \"2000000\"\n  flush.always: \"true\"\n")
	p.signal(syscall.SIGHUP)
	if line, _ := p.waitFor("need a restart"); !strings.Contains(line, "keys=listen") {
		t.Errorf("restart warning: %s", line)
	}
	p.waitFor("nothing to change at run time")
	write(base + "log-level: loud\n")
	p.signal(syscall.SIGHUP)
	if line, _ := p.waitFor("configuration reload failed"); !strings.Contains(line, path+`:7: log-level \"loud\"`) {
		t.Errorf("refusal line: %s", line)
	}
	if _, err := c.ListTopics(ctx); err != nil {
		t.Errorf("broker after a refused reload: %v", err)
	}

	// Back to info: the debug line is no longer logged.
	write(base + "log-level: info\ntopic-defaults:\n  retention.ms: \"2000000\"\n  flush.always: \"true\"\n")
	p.signal(syscall.SIGHUP)
	p.waitFor(`msg="configuration reloaded" changed=log-level`)
	p.signal(syscall.SIGTERM)
	_, rest := p.waitFor(`msg="ringlogd stopped"`)
	for _, l := range rest {
		if strings.Contains(l, "level=DEBUG") {
			t.Errorf("debug line logged at level info: %s", l)
		}
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(processStopGrace):
		t.Error("ringlogd did not exit after SIGTERM")
	}
}

// deploy/check.sh: the systemd unit and its drop-in pass systemd-analyze verify (where it
// exists), the sysctl and limits files parse, and the unit's ExecStart flags load the
// example configuration on this binary.
func TestDeployFiles(t *testing.T) {
	cmd := exec.Command("bash", filepath.Join("..", "..", "deploy", "check.sh"))
	cmd.Env = append(os.Environ(), "RINGLOGD="+ringlogdBin)
	out, err := cmd.CombinedOutput()
	t.Logf("deploy/check.sh:\n%s", out)
	if err != nil {
		t.Fatalf("deploy/check.sh: %v", err)
	}
	if !strings.Contains(string(out), "ok   ExecStart flags load the example configuration") {
		t.Error("check.sh did not check the ExecStart flags")
	}
}

// startedAddr starts ringlogd with args on one shard and an ephemeral port and returns
// the process and the address from its start-up line.
func startedAddr(t *testing.T, args ...string) (*process, string) {
	t.Helper()
	p, started := startedLine(t, args...)
	return p, startedField(t, started, "listen")
}

// startedLine starts ringlogd as startedAddr does and returns its start-up line.
func startedLine(t *testing.T, args ...string) (*process, string) {
	t.Helper()
	p := startProcess(t, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--shards", "1", "--shard-ports", "off", "--pin=false"}, args...)...)
	started, _ := p.waitFor(`msg="ringlogd started"`)
	return p, started
}

// startedField is the value of key (an address) in the start-up line.
func startedField(t *testing.T, started, key string) string {
	t.Helper()
	m := regexp.MustCompile(` ` + key + `=(\S+)`).FindStringSubmatch(started)
	if m == nil {
		t.Fatalf("no %s address in %q", key, started)
	}
	return m[1]
}

func (p *process) stop() (logAfterStart []string) {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	_, rest := p.waitFor(`msg="ringlogd stopped"`)
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(processStopGrace):
		p.t.Fatal("ringlogd did not exit after SIGTERM")
	}
	return rest
}

// The backup procedure of docs/operations.md: stop ringlogd (SIGTERM), copy the data
// directory with cp -a, start a broker on the copy: every record is there and nothing
// needs repairing.
func TestBackupRestoreDataDir(t *testing.T) {
	dir := t.TempDir()
	data, backup := filepath.Join(dir, "data"), filepath.Join(dir, "restored")
	p, addr := startedAddr(t, "--data", data)
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Broker: addr, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "orders", 2, map[string]string{"segment.bytes": "16384"}); err != nil {
		t.Fatal(err)
	}
	const records = 2000
	// Batches well under segment.bytes (a larger batch is refused), so the copy holds many
	// rolled segments per partition.
	prod := c.NewProducer(client.ProducerConfig{BatchBytes: 2048})
	failed := make(chan error, records)
	for i := range records {
		r := &client.Record{Topic: "orders", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value %d", i)}
		if err := prod.Send(ctx, r, func(_ *client.Record, err error) {
			if err != nil {
				failed <- err
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := prod.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d records refused, first: %v", len(failed), <-failed)
	}
	c.Close()
	p.stop()

	if out, err := exec.Command("cp", "-a", data, backup).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	if segments, _ := filepath.Glob(filepath.Join(backup, "orders-*", "*.log")); len(segments) < 4 {
		t.Errorf("the copy holds %d segment files; want several per partition", len(segments))
	}
	p, addr = startedAddr(t, "--data", backup)
	c, err = client.New(ctx, client.Config{Broker: addr, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	co.Assign("orders", 0, client.Earliest())
	co.Assign("orders", 1, client.Earliest())
	seen := map[string]bool{}
	for polls := 0; len(seen) < records && polls < 200; polls++ {
		got, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			seen[string(r.Key)+"="+string(r.Value)] = true
		}
	}
	for i := range records {
		if !seen[fmt.Sprintf("k%d=value %d", i, i)] {
			t.Fatalf("record %d missing from the restored copy (%d of %d seen)", i, len(seen), records)
		}
	}
	for _, l := range p.stop() {
		if strings.Contains(l, "repaired") || strings.Contains(l, "losses") {
			t.Errorf("restore of a stopped broker's copy needed repair: %s", l)
		}
	}
}

// --file-io auto on a real ringlogd: it times both modes on the data dir, logs its choice
// before it starts serving, leaves no scratch file and still serves a produce.
func TestFileIOAuto(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	p := startProcess(t, "--data", data, "--listen", "127.0.0.1:0", "--admin", "", "--shards", "1", "--shard-ports", "off", "--pin=false", "--file-io", "auto")
	chose, _ := p.waitFor("file-io auto")
	if !regexp.MustCompile(`chose="(inline|ring) \(buffered 16384-byte appends, median of \d+ each: inline \S+, ring \S+; backend \S+\)"`).MatchString(chose) {
		t.Fatalf("choice line %q", chose)
	}
	ctx := context.Background()
	c := p.startedClient()
	defer c.Close()
	if err := c.CreateTopic(ctx, "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	prod := c.NewProducer(client.ProducerConfig{})
	defer prod.Close(ctx)
	if _, err := prod.SendSync(ctx, &client.Record{Topic: "t", Partition: 0, Value: []byte("after the probe")}); err != nil {
		t.Fatalf("produce: %v", err)
	}
	entries, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".file-io-probe") {
			t.Fatalf("probe scratch file %s left in the data dir", e.Name())
		}
	}
}

// TestGoMaxProcs: ringlogd runs spareProcs Ps beyond its shards (or the runtime's default,
// if larger) unless the GOMAXPROCS environment variable says otherwise, and logs the value
// in force.
func TestGoMaxProcs(t *testing.T) {
	for _, tc := range []struct {
		env string
		min int // the least gomaxprocs expected
		max int
	}{{"", 1 + spareProcs, 1 << 20}, {"1", 1, 1}} {
		t.Run("env="+tc.env, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.env)
			if tc.env == "" {
				os.Unsetenv("GOMAXPROCS") // t.Setenv restores the old value afterwards
			}
			dir := t.TempDir()
			p := startProcess(t, "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
				"--shards", "1", "--shard-ports", "off", "--pin=false")
			started, _ := p.waitFor(`msg="ringlogd started"`)
			m := regexp.MustCompile(` gomaxprocs=(\d+) `).FindStringSubmatch(started)
			if m == nil {
				t.Fatalf("no gomaxprocs in the start-up line: %s", started)
			}
			if n, _ := strconv.Atoi(m[1]); n < tc.min || n > tc.max {
				t.Fatalf("gomaxprocs=%d, want %d..%d", n, tc.min, tc.max)
			}
		})
	}
}
