package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/admin/scrape"
	"github.com/ringlog/ringlog/netio/client"
)

// TestMetricsOfRealBroker drives a ringlogd process through both APIs and checks that
// /metrics says exactly what happened: offsets, request and error counts, fetched bytes,
// fsyncs, connections; then `ringlog top --once` shows the same partitions.
func TestMetricsOfRealBroker(t *testing.T) {
	b := startBroker(t)
	if b.admin == "" {
		t.Fatal("the start-up line names no admin address")
	}
	base := "http://" + b.admin
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpCall(t, "GET", base+path, nil, ""); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	ctx := testContext(t, time.Minute)
	c := b.client(t)
	if err := c.CreateTopic(ctx, "ops", 2, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Linger: -1}) // acks=all: every produce waits for an fdatasync
	defer p.Close(ctx)
	const records = 20
	for i := range records {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "ops", Partition: int32(i % 2), Value: recordValue("m", i)}); err != nil {
			t.Fatal(err)
		}
	}
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	co.Assign("ops", 0, client.Earliest())
	co.Assign("ops", 1, client.Earliest())
	for got := 0; got < records; {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += len(recs)
	}

	m := scrapeMetrics(t, base)
	size := m.Sum("ringlog_partition_size_bytes", "topic", "ops")
	if fetched := m.Sum("ringlog_fetch_bytes_total"); fetched != size || size == 0 {
		t.Errorf("fetched %v bytes, want each stored byte once: %v", fetched, size)
	}
	if n := m.Sum("ringlog_produce_requests_total"); n != records {
		t.Errorf("produce requests %v, want %d", n, records)
	}
	if fsyncs, _ := m.Value("ringlog_fsync_latency_seconds"); fsyncs < 1 {
		t.Errorf("%v fdatasyncs counted after acks=all produces", fsyncs)
	}
	if lat, _ := m.Value("ringlog_produce_latency_seconds"); lat != records {
		t.Errorf("produce latency observations %v, want %d", lat, records)
	}
	if conns, _ := m.Value("ringlog_connections"); conns < 1 {
		t.Errorf("connections %v with a client connected", conns)
	}

	// HTTP: a batch to partition 0, an idempotent record to partition 1 sent twice, and a
	// sequence gap that must be refused and counted by code.
	if code, body := httpCall(t, "POST", base+"/v1/topics/ops/records?acks=1&partition=0", nil, `{"records": [{"value": "a"}, {"value": "b"}, {"value": "c"}]}`); code != 202 {
		t.Fatalf("HTTP batch produce: %d %s", code, body)
	}
	idem := http.Header{"X-Producer-Id": {"e2e-http"}, "X-Sequence": {"0"}}
	_, first := httpCall(t, "POST", base+"/v1/topics/ops/records?partition=1", idem, `{"value": "once"}`)
	if code, again := httpCall(t, "POST", base+"/v1/topics/ops/records?partition=1", idem, `{"value": "once"}`); code != 202 || again != first {
		t.Fatalf("retried HTTP produce: %d %s, first answer %s", code, again, first)
	}
	idem.Set("X-Sequence", "5")
	if code, body := httpCall(t, "POST", base+"/v1/topics/ops/records?partition=1", idem, `{"value": "gap"}`); code != 409 {
		t.Fatalf("sequence gap: %d %s", code, body)
	}
	code, body := httpCall(t, "GET", base+"/v1/topics/ops/records?partition=0&offset=10", nil, "")
	var f struct {
		Records []struct {
			Offset int64   `json:"offset"`
			Value  *string `json:"value"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(body), &f); code != 200 || err != nil || len(f.Records) != 3 || *f.Records[2].Value != "c" || f.Records[2].Offset != 12 {
		t.Fatalf("HTTP fetch from 10: %d %s", code, body)
	}

	// An HTTP consumer group commits part of the way: its lag is exported per partition.
	if code, body := httpCall(t, "POST", base+"/v1/groups/e2e-http/offsets", nil, `{"topic": "ops", "offsets": {"0": 10, "1": 5}}`); code != 204 {
		t.Fatalf("HTTP offset commit: %d %s", code, body)
	}

	m = scrapeMetrics(t, base)
	for part, lag := range map[string]float64{"0": 3, "1": 6} {
		if v, ok := m.Value("ringlog_group_lag_records", "group", "e2e-http", "topic", "ops", "partition", part); !ok || v != lag {
			t.Errorf("group lag on partition %s: %v (present %v), want %v", part, v, ok, lag)
		}
		if _, ok := m.Value("ringlog_group_retention_overtake_seconds", "group", "e2e-http", "topic", "ops", "partition", part); !ok {
			t.Errorf("no retention overtake estimate for partition %s", part)
		}
	}
	for part, end := range map[string]float64{"0": 13, "1": 11} {
		if v, _ := m.Value("ringlog_partition_log_end_offset", "topic", "ops", "partition", part); v != end {
			t.Errorf("partition %s end offset %v, want %v", part, v, end)
		}
		if v, _ := m.Value("ringlog_partition_high_watermark", "topic", "ops", "partition", part); v != end {
			t.Errorf("partition %s high watermark %v, want %v", part, v, end)
		}
	}
	if n := m.Sum("ringlog_produce_requests_total"); n != records+5 {
		t.Errorf("produce requests %v, want %d (20 binary, 1 HTTP batch, 3 idempotent, 1 offset commit into __consumer_offsets)", n, records+5)
	}
	if n, _ := m.Value("ringlog_produce_errors_total", "code", "OUT_OF_ORDER_SEQUENCE"); n != 1 {
		t.Errorf("OUT_OF_ORDER_SEQUENCE produce errors %v, want 1", n)
	}
	if n, _ := m.Value("ringlog_offline_partitions"); n != 0 {
		t.Errorf("offline partitions %v", n)
	}

	res := ok(t, "", nil, "top", "--once", "--admin", b.admin, "--interval", "200ms", "--topic", "ops")
	if !containsRow(res.stdout, "ops", "0", "0", "13", "13") || !containsRow(res.stdout, "ops", "1", "0", "11", "11") {
		t.Errorf("ringlog top --once lacks the partitions' offsets:\n%s", res.stdout)
	}
}

// containsRow reports whether a line of out starts with the fields want.
func containsRow(out string, want ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(want) && fmt.Sprint(f[:len(want)]) == fmt.Sprint(want) {
			return true
		}
	}
	return false
}

// waitMetric scrapes b until the series of name with labels reads want (replication
// publishes ISR changes asynchronously), failing after half a minute.
func waitMetric(t *testing.T, b *broker, name string, want float64, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, ok := scrapeMetrics(t, "http://"+b.admin).Value(name, labels...)
		if ok && v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process: no clock to inject
	}
}

// TestMetricsOfStorageHelpers: the write-back starter and the background zeroing run off
// the shard loops, so their counters come from their own seams. A flush.always topic
// (page-cache mode: 4 MiB of zeros kept ahead of its end by default) and 64 KiB write-back
// steps must both show up in /metrics after 512 KiB of produces; the recycling counters too.
func TestMetricsOfStorageHelpers(t *testing.T) {
	b := startBroker(t, "--writeback-bytes", "65536")
	base := "http://" + b.admin
	ctx := testContext(t, time.Minute)
	c := b.client(t)
	if err := c.CreateTopic(ctx, "durable", 1, map[string]string{"flush.always": "true"}); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	defer p.Close(ctx)
	value := make([]byte, 32<<10)
	for i := range 16 {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "durable", Partition: 0, Value: value}); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	// Both helpers run on goroutines of their own: wait (bounded) for their counters.
	var m scrape.Metrics
	for range 100 {
		m = scrapeMetrics(t, base)
		if started, _ := m.Value("ringlog_writeback_started_total"); started >= 1 {
			if zeros, _ := m.Value("ringlog_preallocate_bytes_total"); zeros > 0 {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if started, ok := m.Value("ringlog_writeback_started_total"); !ok || started < 1 {
		t.Errorf("write-back starts %v (present %v) after 512 KiB in 64 KiB steps", started, ok)
	}
	if _, ok := m.Value("ringlog_writeback_dropped_total"); !ok {
		t.Error("no ringlog_writeback_dropped_total series")
	}
	if wakes, ok := m.Value("ringlog_writeback_wakeups_total"); !ok || wakes < 1 {
		t.Errorf("write-back wake-ups %v (present %v) after write-back started", wakes, ok)
	}
	if jobs, _ := m.Value("ringlog_preallocate_jobs_total"); jobs < 1 {
		t.Errorf("preallocate jobs %v on a flush.always topic", jobs)
	}
	if zeros, _ := m.Value("ringlog_preallocate_bytes_total"); zeros <= 0 {
		t.Errorf("preallocate bytes %v on a flush.always topic", zeros)
	}
	if failed, ok := m.Value("ringlog_preallocate_failed_total"); !ok || failed != 0 {
		t.Errorf("preallocate failures %v (present %v)", failed, ok)
	}
	// Segment recycling is off for page-cache topics and nothing was retired: the series
	// are there, at 0 (engine's TestRecycle* count them).
	for _, name := range []string{"ringlog_recycle_pooled_total", "ringlog_recycle_reused_total", "ringlog_recycle_released_total", "ringlog_recycle_unmapped_total"} {
		if v, ok := m.Value(name); !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0 on a page-cache broker", name, v, ok)
		}
	}
}

func scrapeMetrics(t *testing.T, base string) scrape.Metrics {
	t.Helper()
	m, err := scrape.Fetch(testContext(t, 30*time.Second), http.DefaultClient, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// httpCall sends one request and returns the status and body.
func httpCall(t *testing.T, method, url string, header http.Header, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}
