package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/admin/scrape"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
)

// startBroker starts an in-process broker (the stack ringlogd runs) with its admin
// listener and returns it with the admin base URL.
func startBroker(t *testing.T, cfg admin.Config) (*brokertest.Broker, string) {
	t.Helper()
	b := brokertest.Start(t, brokertest.Options{Admin: &cfg})
	return b, "http://" + b.Node.Admin.Addr()
}

// call sends one HTTP request and decodes a JSON answer into out (if not nil).
func call(t *testing.T, method, url string, header http.Header, body string, out any) int {
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
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %q is not JSON: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

type apiError struct {
	Error struct {
		Code    int    `json:"code"`
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
}

type produced struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

type fetched struct {
	Records []struct {
		Partition int32             `json:"partition"`
		Offset    int64             `json:"offset"`
		Key       *string           `json:"key"`
		Value     *string           `json:"value"`
		Headers   map[string]string `json:"headers"`
	} `json:"records"`
	NextOffset    int64 `json:"next_offset"`
	HighWatermark int64 `json:"high_watermark"`
}

func createTopic(t *testing.T, base, name string, partitions int) {
	t.Helper()
	var out map[string]any
	if code := call(t, "POST", base+"/v1/topics", nil, fmt.Sprintf(`{"name": %q, "partitions": %d, "replication_factor": 1}`, name, partitions), &out); code != http.StatusCreated {
		t.Fatalf("create topic %s: %d %v", name, code, out)
	}
}

// HTTP produce, binary consume: the records and headers come back byte for byte at the
// offsets the HTTP answer gave.
func TestHTTPProduceBinaryConsume(t *testing.T) {
	b, base := startBroker(t, admin.Config{})
	createTopic(t, base, "h2b", 1)
	var one produced
	if code := call(t, "POST", base+"/v1/topics/h2b/records?acks=all", nil, `{"key": "k0", "value": "v0", "headers": {"h": "x"}}`, &one); code != http.StatusAccepted || one.Offset != 0 {
		t.Fatalf("single produce: %d %+v", code, one)
	}
	var many struct{ Records []produced }
	body := `{"records": [{"key": "k1", "value": "v1"}, {"value": "v2"}, {"key": "k3", "value": null}]}`
	if code := call(t, "POST", base+"/v1/topics/h2b/records", nil, body, &many); code != http.StatusAccepted || len(many.Records) != 3 || many.Records[2].Offset != 3 {
		t.Fatalf("batch produce: %d %+v", code, many)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	co := b.Client.NewConsumer(client.ConsumerConfig{})
	co.Assign("h2b", 0, client.Earliest())
	var got []client.ConsumedRecord
	for len(got) < 4 {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, recs...)
	}
	want := []struct{ key, value string }{{"k0", "v0"}, {"k1", "v1"}, {"", "v2"}, {"k3", ""}}
	for i, w := range want {
		if string(got[i].Key) != w.key || string(got[i].Value) != w.value || got[i].Offset != int64(i) {
			t.Errorf("record %d: key %q value %q offset %d, want %q %q %d", i, got[i].Key, got[i].Value, got[i].Offset, w.key, w.value, i)
		}
	}
	if got[2].Key != nil || got[3].Value != nil {
		t.Errorf("null key/value came back as %q/%q", got[2].Key, got[3].Value)
	}
	if len(got[0].Headers) != 1 || got[0].Headers[0].Key != "h" || string(got[0].Headers[0].Value) != "x" {
		t.Errorf("headers %+v, want h=x", got[0].Headers)
	}
}

// Binary produce, HTTP consume: a long-poll fetch waits for a record produced after it
// started, and max bounds the records returned.
func TestBinaryProduceHTTPConsume(t *testing.T) {
	b, base := startBroker(t, admin.Config{})
	ctx := context.Background()
	if err := b.Client.CreateTopic(ctx, "b2h", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := b.Client.NewProducer(client.ProducerConfig{})
	defer p.Close(ctx)
	for i := range 5 {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "b2h", Partition: 0, Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var f fetched
	if code := call(t, "GET", base+"/v1/topics/b2h/records?partition=0&offset=1&max=3", nil, "", &f); code != http.StatusOK {
		t.Fatalf("fetch: %d %+v", code, f)
	}
	if len(f.Records) != 3 || f.Records[0].Offset != 1 || *f.Records[0].Value != "v1" || f.NextOffset != 4 || f.HighWatermark != 5 {
		t.Fatalf("fetch from 1 max 3: %+v", f)
	}
	// Long-poll: nothing at offset 5 yet; a produce wakes the parked fetch.
	done := make(chan fetched, 1)
	go func() {
		var f fetched
		call(t, "GET", base+"/v1/topics/b2h/records?offset=5&wait_ms=20000", nil, "", &f)
		done <- f
	}()
	if _, err := p.SendSync(ctx, &client.Record{Topic: "b2h", Partition: 0, Value: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-done:
		if len(f.Records) != 1 || *f.Records[0].Value != "late" || f.Records[0].Offset != 5 {
			t.Fatalf("long-poll answer %+v", f)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("long-poll fetch did not answer")
	}
}

// A retried produce with the same X-Producer-Id and X-Sequence answers the original
// offset and writes nothing; the next sequence appends.
func TestHTTPIdempotentRetry(t *testing.T) {
	b, base := startBroker(t, admin.Config{})
	createTopic(t, base, "idem", 2)
	h := http.Header{"X-Producer-Id": {"billing"}, "X-Sequence": {"0"}}
	var first, again, next produced
	body := `{"key": "order-1", "value": "paid"}`
	if code := call(t, "POST", base+"/v1/topics/idem/records", h, body, &first); code != http.StatusAccepted {
		t.Fatalf("first: %d", code)
	}
	if code := call(t, "POST", base+"/v1/topics/idem/records", h, body, &again); code != http.StatusAccepted || again != first {
		t.Fatalf("retry: %d %+v, want %+v", code, again, first)
	}
	h.Set("X-Sequence", "1")
	if code := call(t, "POST", base+"/v1/topics/idem/records", h, `{"key": "order-1", "value": "shipped"}`, &next); code != http.StatusAccepted || next.Offset != first.Offset+1 || next.Partition != first.Partition {
		t.Fatalf("next sequence: %d %+v after %+v", code, next, first)
	}
	_, states, err := b.Core.DescribeTopic("idem")
	if err != nil {
		t.Fatal(err)
	}
	if end := states[first.Partition].LogEndOffset; end != 2 {
		t.Fatalf("log end %d after a retry, want 2 (no duplicate)", end)
	}
	// A gap is refused with the protocol's code.
	h.Set("X-Sequence", "7")
	var gap apiError
	if code := call(t, "POST", base+"/v1/topics/idem/records", h, body, &gap); code != http.StatusConflict || gap.Error.Name != "OUT_OF_ORDER_SEQUENCE" {
		t.Fatalf("sequence gap: %d %+v", code, gap)
	}
	// The same name after a broker restart would resume its epoch: ProducerIdentity
	// never bumps it, so a binary-protocol producer holding the name is not fenced.
}

// Malformed, oversized and wrong requests get 4xx JSON errors with the protocol's codes.
func TestHTTPErrors(t *testing.T) {
	_, base := startBroker(t, admin.Config{BodyBytesMax: 1024})
	createTopic(t, base, "errs", 1)
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"malformed JSON", "POST", "/v1/topics/errs/records", `{"value": `, 400, "INVALID_REQUEST"},
		{"unknown field", "POST", "/v1/topics/errs/records", `{"valu": "x"}`, 400, "INVALID_REQUEST"},
		{"trailing data", "POST", "/v1/topics/errs/records", `{"value": "x"} {}`, 400, "INVALID_REQUEST"},
		{"both forms", "POST", "/v1/topics/errs/records", `{"value": "x", "records": [{"value": "y"}]}`, 400, "INVALID_REQUEST"},
		{"empty batch", "POST", "/v1/topics/errs/records", `{"records": []}`, 400, "INVALID_REQUEST"},
		{"oversized", "POST", "/v1/topics/errs/records", `{"value": "` + strings.Repeat("x", 2048) + `"}`, 413, "MESSAGE_TOO_LARGE"},
		{"unknown topic", "POST", "/v1/topics/nope/records", `{"value": "x"}`, 404, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"no such partition", "POST", "/v1/topics/errs/records?partition=9", `{"value": "x"}`, 404, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"bad acks", "POST", "/v1/topics/errs/records?acks=2", `{"value": "x"}`, 400, "INVALID_REQUIRED_ACKS"},
		{"sequence without id", "POST", "/v1/topics/errs/records", `{"value": "x"}`, 400, "INVALID_REQUEST"},
		{"topic exists", "POST", "/v1/topics", `{"name": "errs"}`, 409, "TOPIC_ALREADY_EXISTS"},
		{"bad topic name", "POST", "/v1/topics", `{"name": "a/b"}`, 400, "INVALID_TOPIC"},
		{"replication factor", "POST", "/v1/topics", `{"name": "rf", "replication_factor": 3}`, 400, "INVALID_REPLICATION_FACTOR"},
		{"offset out of range", "GET", "/v1/topics/errs/records?offset=99", "", 416, "OFFSET_OUT_OF_RANGE"},
		{"bad max", "GET", "/v1/topics/errs/records?max=0", "", 400, "INVALID_REQUEST"},
		{"wait too long", "GET", "/v1/topics/errs/records?wait_ms=99999999", "", 400, "INVALID_REQUEST"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h http.Header
			if c.name == "sequence without id" {
				h = http.Header{"X-Sequence": {"0"}}
			}
			var e apiError
			if status := call(t, c.method, base+c.path, h, c.body, &e); status != c.status || e.Error.Name != c.code || e.Error.Message == "" {
				t.Errorf("%d %+v, want %d %s with a message", status, e, c.status, c.code)
			}
		})
	}
}

// /healthz answers while the process runs; /readyz only while the broker serves.
func TestHealthAndReadiness(t *testing.T) {
	b, base := startBroker(t, admin.Config{})
	if code := call(t, "GET", base+"/healthz", nil, "", nil); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
	if code := call(t, "GET", base+"/readyz", nil, "", nil); code != http.StatusOK {
		t.Fatalf("readyz %d", code)
	}
	b.Node.Admin.SetReady(false) // what shutdown does first
	if code := call(t, "GET", base+"/readyz", nil, "", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz while shutting down: %d", code)
	}
}

// The admin listener closes connections past its per-address cap at accept.
func TestAdminConnectionsPerAddress(t *testing.T) {
	_, base := startBroker(t, admin.Config{ConnectionsPerAddressMax: 2})
	addr := strings.TrimPrefix(base, "http://")
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// The first two are served; the third is closed without an answer.
	for i, c := range conns {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		line, err := readLine(c)
		if i < 2 && !strings.Contains(line, "200") {
			t.Errorf("connection %d: %q %v, want 200", i, line, err)
		}
		if i == 2 && err == nil {
			t.Errorf("connection 3 over the cap was answered: %q", line)
		}
	}
}

func readLine(c net.Conn) (string, error) {
	var buf bytes.Buffer
	one := make([]byte, 1)
	for {
		if _, err := c.Read(one); err != nil {
			return buf.String(), err
		}
		if one[0] == '\n' {
			return buf.String(), nil
		}
		buf.WriteByte(one[0])
	}
}

// Scrape after producing and consuming through both APIs: the partition offsets, request
// counters, error counts and connection gauge are the values the traffic implies.
func TestMetricsAfterTraffic(t *testing.T) {
	b, base := startBroker(t, admin.Config{})
	ctx := context.Background()
	if err := b.Client.CreateTopic(ctx, "m", 2, nil); err != nil {
		t.Fatal(err)
	}
	p := b.Client.NewProducer(client.ProducerConfig{Linger: -1})
	defer p.Close(ctx)
	for i := range 10 {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "m", Partition: int32(i % 2), Value: []byte("0123456789")}); err != nil {
			t.Fatal(err)
		}
	}
	var f fetched
	call(t, "GET", base+"/v1/topics/m/records?partition=0", nil, "", &f)
	var e apiError
	call(t, "GET", base+"/v1/topics/m/records?partition=0&offset=1000", nil, "", &e)
	m, err := scrape.Fetch(ctx, http.DefaultClient, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"0", "1"} {
		for name, want := range map[string]float64{
			"ringlog_partition_log_end_offset": 5, "ringlog_partition_high_watermark": 5,
			"ringlog_partition_log_start_offset": 0, "ringlog_partition_segments": 1, "ringlog_partition_isr_size": 1,
		} {
			if v, ok := m.Value(name, "topic", "m", "partition", part); !ok || v != want {
				t.Errorf("%s{partition=%s} = %v (present %v), want %v", name, part, v, ok, want)
			}
		}
	}
	if v := m.Sum("ringlog_produce_requests_total"); v != 10 {
		t.Errorf("produce requests %v, want 10 (one partition each, sent one by one)", v)
	}
	if v := m.Sum("ringlog_fetch_requests_total"); v != 2 {
		t.Errorf("fetch requests %v, want 2", v)
	}
	if v, _ := m.Value("ringlog_fetch_errors_total", "code", "OFFSET_OUT_OF_RANGE"); v != 1 {
		t.Errorf("fetch OFFSET_OUT_OF_RANGE errors %v, want 1", v)
	}
	size, _ := m.Value("ringlog_partition_size_bytes", "topic", "m", "partition", "0")
	if fb := m.Sum("ringlog_fetch_bytes_total"); fb != size || size <= 0 {
		t.Errorf("fetch bytes %v, want the partition's %v bytes (read whole once)", fb, size)
	}
	if v, _ := m.Value("ringlog_produce_latency_seconds"); v != 10 {
		t.Errorf("produce latency observations %v, want 10", v)
	}
	if v, _ := m.Value("ringlog_connections"); v < 1 {
		t.Errorf("connections %v with a client connected", v)
	}
	for _, name := range []string{"ringlog_under_replicated_partitions", "ringlog_offline_partitions", "ringlog_isr_shrinks_total"} {
		if v, ok := m.Value(name); !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0 on a lone broker", name, v, ok)
		}
	}
	if v, _ := m.Value("ringlog_http_requests_total", "endpoint", "fetch", "code", "416"); v != 1 {
		t.Errorf("HTTP fetches answered 416: %v, want 1", v)
	}
	for _, name := range []string{"ringlog_shard_ring_submissions_total", "ringlog_shard_ring_lost_wakeups_total", "ringlog_shard_loop_busy_ratio", "ringlog_shard_mailbox_depth",
		"ringlog_fsync_latency_seconds", "go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := m[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
}

// A retry of an idempotent HTTP produce after a broker restart still answers the original
// offset: the name resumes its id and epoch (kept in producer-ids.json) and the partition
// rebuilt its dedup state from the log.
func TestHTTPIdempotentRetryAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := admin.Config{}
	b := brokertest.Start(t, brokertest.Options{Dir: dir, Admin: &cfg})
	base := "http://" + b.Node.Admin.Addr()
	createTopic(t, base, "restart", 1)
	h := http.Header{"X-Producer-Id": {"ledger"}, "X-Sequence": {"0"}}
	var first, again produced
	if code := call(t, "POST", base+"/v1/topics/restart/records", h, `{"records": [{"value": "a"}, {"value": "b"}]}`, nil); code != http.StatusAccepted {
		t.Fatalf("first: %d", code)
	}
	h.Set("X-Sequence", "2")
	if code := call(t, "POST", base+"/v1/topics/restart/records", h, `{"value": "c"}`, &first); code != http.StatusAccepted || first.Offset != 2 {
		t.Fatalf("second: %d %+v", code, first)
	}
	b.Stop()
	b = brokertest.Start(t, brokertest.Options{Dir: dir, Admin: &cfg})
	base = "http://" + b.Node.Admin.Addr()
	if code := call(t, "POST", base+"/v1/topics/restart/records", h, `{"value": "c"}`, &again); code != http.StatusAccepted || again != first {
		t.Fatalf("retry after restart: %d %+v, want %+v", code, again, first)
	}
	_, states, err := b.Core.DescribeTopic("restart")
	if err != nil || states[0].LogEndOffset != 3 {
		t.Fatalf("log end %+v %v, want 3 (the retry wrote nothing)", states, err)
	}
}

// A broker whose main listener requires authentication offers no unauthenticated way
// around it: the JSON API answers 403, metrics and health still answer.
func TestAPIRefusedWhenAuthRequired(t *testing.T) {
	cfg := admin.Config{}
	b := brokertest.Start(t, brokertest.Options{Admin: &cfg, NoClient: true, Node: func(c *node.Config) {
		c.Server.Security = &netio.Security{AuthRequired: true}
	}})
	base := "http://" + b.Node.Admin.Addr()
	var e apiError
	for _, path := range []string{"/v1/topics", "/v1/topics/t/records"} {
		if code := call(t, "POST", base+path, nil, `{"name": "t"}`, &e); code != http.StatusForbidden || !strings.Contains(e.Error.Message, "authentication") {
			t.Errorf("POST %s with auth required: %d %+v", path, code, e)
		}
	}
	if code := call(t, "GET", base+"/metrics", nil, "", nil); code != http.StatusOK {
		t.Errorf("metrics with auth required: %d", code)
	}
	if b.Core.Topic("t") != nil {
		t.Error("the refused create made a topic")
	}
}
