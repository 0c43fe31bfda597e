package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
)

// cliResult is one finished ringlog invocation.
type cliResult struct {
	stdout, stderr string
	code           int
}

const cliTimeout = 60 * time.Second

// ringlog runs the CLI binary with args, stdin and extra environment (KEY=VALUE).
func ringlog(t *testing.T, stdin string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ringlog"), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	default:
		t.Fatalf("ringlog %q: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("ringlog %q did not finish within %v", args, cliTimeout)
	}
	return res
}

// ok runs ringlog and requires exit status 0.
func ok(t *testing.T, stdin string, env []string, args ...string) cliResult {
	t.Helper()
	res := ringlog(t, stdin, env, args...)
	if res.code != 0 {
		t.Fatalf("ringlog %q: exit %d\nstderr: %s", args, res.code, res.stderr)
	}
	return res
}

// fails runs ringlog and requires a non-zero exit with exactly one stderr line containing
// want.
func fails(t *testing.T, want string, env []string, args ...string) {
	t.Helper()
	res := ringlog(t, "", env, args...)
	if res.code == 0 {
		t.Errorf("ringlog %q: exit 0, want failure\nstdout: %s", args, res.stdout)
		return
	}
	lines := strings.Split(strings.TrimSuffix(res.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("ringlog %q: exit %d, stderr %q, want one line containing %q", args, res.code, res.stderr, want)
	}
}

func TestCLI(t *testing.T) {
	b := startBroker(t)
	broker := []string{"--broker", b.addr}
	env := []string{"RINGLOG_BROKER=" + b.addr}
	const lines = 3000
	const partitions = 3

	res := ok(t, "", nil, append([]string{"topic", "create", "clitopic", "--partitions", fmt.Sprint(partitions), "--config", "retention.ms=3600000"}, broker...)...)
	if !strings.Contains(res.stdout, "created topic clitopic with 3 partitions") {
		t.Errorf("topic create output %q", res.stdout)
	}
	ok(t, "", env, "topic", "create", "other", "--partitions", "1") // broker from the environment
	res = ok(t, "", env, "topic", "list")
	if !regexp.MustCompile(`(?m)^clitopic\s+3$`).MatchString(res.stdout) || !regexp.MustCompile(`(?m)^other\s+1$`).MatchString(res.stdout) {
		t.Errorf("topic list:\n%s", res.stdout)
	}

	// produce: one record per line, key before the separator.
	var in strings.Builder
	var want []string
	for i := range lines {
		line := fmt.Sprintf("user-%d,event %d: %s", i%97, i, strings.Repeat("x", i%50))
		in.WriteString(line + "\n")
		want = append(want, line)
	}
	res = ok(t, in.String(), env, "produce", "clitopic", "--key-separator", ",", "--acks", "all", "--compression", "zstd")
	if !regexp.MustCompile(fmt.Sprintf(`^produced %d records, \d+ bytes in [0-9.]+ s \([0-9.]+ MB/s`, lines)).MatchString(res.stderr) {
		t.Errorf("produce summary %q", res.stderr)
	}

	res = ok(t, "", env, "topic", "describe", "clitopic")
	if !strings.Contains(res.stdout, fmt.Sprintf("topic clitopic  partitions 3  records %d", lines)) || !strings.Contains(res.stdout, "config retention.ms=3600000") {
		t.Errorf("topic describe:\n%s", res.stdout)
	}

	// consume everything back: same lines, per-partition order, keys on their hash partition.
	res = ok(t, "", env, "consume", "clitopic", "--exit-at-end", "--print-key", "--print-offset", "--key-separator", ",")
	got := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	if len(got) != lines {
		t.Fatalf("consume --exit-at-end printed %d lines, want %d", len(got), lines)
	}
	var values []string
	lastIndex := map[string]int{}
	for _, line := range got {
		pos, rest, _ := strings.Cut(line, "\t")
		partition, _, _ := strings.Cut(pos, ":")
		key, _, _ := strings.Cut(rest, ",")
		if fmt.Sprint(client.KeyPartition([]byte(key), partitions)) != partition {
			t.Fatalf("key %q printed from partition %s", key, partition)
		}
		var index int
		if _, err := fmt.Sscanf(rest[strings.Index(rest, "event "):], "event %d", &index); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if prev, seen := lastIndex[partition]; seen && index < prev {
			t.Fatalf("partition %s: event %d printed after %d", partition, index, prev)
		}
		lastIndex[partition] = index
		values = append(values, rest)
	}
	slices.Sort(values)
	slices.Sort(want)
	if !slices.Equal(values, want) {
		t.Fatal("consumed lines differ from produced lines")
	}

	res = ok(t, "", env, "consume", "clitopic", "--partition", "1", "--from", "2", "--max", "5", "--print-offset")
	if got := strings.Count(res.stdout, "\n"); got != 5 || !strings.HasPrefix(res.stdout, "1:2\t") {
		t.Errorf("consume --partition 1 --from 2 --max 5:\n%s", res.stdout)
	}
	res = ok(t, "", env, "consume", "clitopic", "--from", "latest", "--exit-at-end")
	if res.stdout != "" {
		t.Errorf("consume --from latest --exit-at-end printed %q", res.stdout)
	}

	res = ok(t, "", env, "topic", "config", "clitopic", "--set", "retention.ms=7200000")
	if !regexp.MustCompile(`(?m)^retention\.ms\s+7200000\s+topic`).MatchString(res.stdout) {
		t.Errorf("topic config:\n%s", res.stdout)
	}

	// Failures: non-zero exit, one line on stderr.
	fails(t, "UNKNOWN_TOPIC_OR_PARTITION", env, "consume", "nosuch")
	fails(t, "UNKNOWN_TOPIC_OR_PARTITION", env, "produce", "nosuch")
	fails(t, "UNKNOWN_TOPIC_OR_PARTITION", env, "topic", "describe", "nosuch")
	fails(t, "UNKNOWN_TOPIC_OR_PARTITION", env, "topic", "delete", "nosuch")
	fails(t, "TOPIC_ALREADY_EXISTS", env, "topic", "create", "clitopic", "--partitions", "3")
	fails(t, "INVALID_CONFIG", env, "topic", "config", "clitopic", "--set", "no.such=1")
	fails(t, "OFFSET_OUT_OF_RANGE", env, "consume", "clitopic", "--partition", "0", "--from", "999999999")
	fails(t, "flag provided but not defined", env, "topic", "list", "--bogus")
	fails(t, "--acks", env, "produce", "clitopic", "--acks", "2")
	fails(t, "--from", env, "consume", "clitopic", "--from", "yesterday")
	fails(t, "missing NAME", env, "topic", "create")
	if res := ringlog(t, "", env, "nosuchcommand"); res.code == 0 || !strings.Contains(res.stderr, `unknown command "nosuchcommand"`) {
		t.Errorf("unknown command: exit %d, stderr %q", res.code, res.stderr)
	}
	down := freeAddr(t)
	fails(t, "connect to broker "+down, nil, "topic", "list", "--broker", down)
	fails(t, "connect to broker "+down, []string{"RINGLOG_BROKER=" + down}, "consume", "clitopic")

	res = ok(t, "", env, "topic", "delete", "clitopic")
	if !strings.Contains(res.stdout, "deleted topic clitopic") {
		t.Errorf("topic delete output %q", res.stdout)
	}
	if res = ok(t, "", env, "topic", "list"); strings.Contains(res.stdout, "clitopic") {
		t.Errorf("topic list after delete:\n%s", res.stdout)
	}
}

// TestCLIFollow runs consume without --exit-at-end: --from latest prints only records
// produced after it started, and SIGINT ends a following consume with status 0 after
// everything already read was printed.
func TestCLIFollow(t *testing.T) {
	b := startBroker(t)
	ctx := testContext(t, 60*time.Second)
	c := b.client(t)
	if err := c.CreateTopic(ctx, "follow", 2, nil); err != nil {
		t.Fatal(err)
	}
	acks := produceRecords(t, ctx, c, "follow", "f", 0, 500, client.ProducerConfig{})

	// --from latest --max 1: keep producing until it prints one record and exits.
	latest := exec.CommandContext(ctx, filepath.Join(binDir, "ringlog"), "consume", "follow", "--broker", b.addr, "--from", "latest", "--max", "1")
	var latestOut bytes.Buffer
	latest.Stdout = &latestOut
	if err := latest.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- latest.Wait() }()
	p := c.NewProducer(client.ProducerConfig{Linger: -1})
	defer p.Close(ctx)
	var latestErr error
	produced := 0
waitLatest:
	for ; produced < 100_000; produced++ {
		select {
		case latestErr = <-exited:
			break waitLatest
		default:
		}
		if _, err := p.SendSync(ctx, &client.Record{Topic: "follow", Partition: int32(produced % 2), Value: fmt.Appendf(nil, "tick-%d", produced)}); err != nil {
			t.Fatal(err)
		}
	}
	if latestErr != nil || !regexp.MustCompile(`^tick-\d+\n$`).MatchString(latestOut.String()) {
		t.Fatalf("consume --from latest --max 1: %v, printed %q after %d ticks", latestErr, latestOut.String(), produced)
	}

	// A following consume from earliest: wait for the first 500 lines, then SIGINT.
	follow := exec.CommandContext(ctx, filepath.Join(binDir, "ringlog"), "consume", "follow", "--broker", b.addr, "--partition", "0")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, a := range acks {
		if a.partition == 0 {
			want++
		}
	}
	scanner := bufio.NewScanner(stdout)
	scanner.Buffer(nil, 1<<20)
	lines := 0
	for lines < want && scanner.Scan() {
		lines++
	}
	if lines < want {
		t.Fatalf("following consume printed %d lines, want at least %d: %v", lines, want, scanner.Err())
	}
	if err := follow.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for scanner.Scan() { // drain what it prints before exiting
	}
	if err := follow.Wait(); err != nil {
		t.Errorf("consume after SIGINT: %v, want exit status 0", err)
	}
}
