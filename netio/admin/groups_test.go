package admin_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/admin/scrape"
	"github.com/ringlog/ringlog/netio/client"
)

type groupRecords struct {
	Records []struct {
		Partition int32   `json:"partition"`
		Offset    int64   `json:"offset"`
		Value     *string `json:"value"`
	} `json:"records"`
	Positions map[string]int64 `json:"positions"`
}

// An HTTP consumer reads a group's records from its committed offsets, commits what it
// processed, and the lag endpoint follows.
func TestHTTPGroupConsumeCommitLag(t *testing.T) {
	_, base := startBroker(t, admin.Config{})
	createTopic(t, base, "gt", 2)
	for i := range 6 {
		url := fmt.Sprintf("%s/v1/topics/gt/records?partition=%d", base, i%2)
		if code := call(t, "POST", url, nil, fmt.Sprintf(`{"value": "v%d"}`, i), nil); code != http.StatusAccepted {
			t.Fatalf("produce %d: %d", i, code)
		}
	}
	var lag map[string]*int64
	if code := call(t, "GET", base+"/v1/groups/g1/lag?topic=gt", nil, "", &lag); code != 200 || lag["0"] != nil || lag["1"] != nil {
		t.Fatalf("lag before any commit: %d %v", code, lag)
	}
	var got groupRecords
	if code := call(t, "GET", base+"/v1/groups/g1/records?topic=gt&max=4", nil, "", &got); code != 200 || len(got.Records) != 4 {
		t.Fatalf("first read: %d %+v", code, got)
	}
	if got.Positions["0"] != 3 || got.Positions["1"] != 1 {
		t.Fatalf("positions %v after 3 records of partition 0 and 1 of partition 1", got.Positions)
	}
	body := fmt.Sprintf(`{"topic": "gt", "offsets": {"0": %d, "1": %d}}`, got.Positions["0"], got.Positions["1"])
	if code := call(t, "POST", base+"/v1/groups/g1/offsets", nil, body, nil); code != http.StatusNoContent {
		t.Fatalf("commit: %d", code)
	}
	if code := call(t, "GET", base+"/v1/groups/g1/lag?topic=gt", nil, "", &lag); code != 200 || *lag["0"] != 0 || *lag["1"] != 2 {
		t.Fatalf("lag after commit: %d %v", code, lag)
	}
	if code := call(t, "GET", base+"/v1/groups/g1/records?topic=gt", nil, "", &got); code != 200 || len(got.Records) != 2 || *got.Records[0].Value != "v3" {
		t.Fatalf("second read from the committed offsets: %d %+v", code, got)
	}
	// Bad bodies and names.
	var e apiError
	for _, c := range []struct{ body, name string }{
		{`{"topic": "gt", "offsets": {"x": 1}}`, "INVALID_REQUEST"},
		{`{"topic": "gt", "offsets": {"0": -5}}`, "INVALID_REQUEST"},
		{`{"topic": "gt", "offsets": {}}`, "INVALID_REQUEST"},
		{`{"topic": "gt", "offsets": {"7": 1}}`, "UNKNOWN_TOPIC_OR_PARTITION"},
		{`{"topic": "nope", "offsets": {"0": 1}}`, "UNKNOWN_TOPIC_OR_PARTITION"},
	} {
		if code := call(t, "POST", base+"/v1/groups/g1/offsets", nil, c.body, &e); code/100 != 4 || e.Error.Name != c.name {
			t.Errorf("commit %s: %d %+v, want 4xx %s", c.body, code, e, c.name)
		}
	}
	if code := call(t, "GET", base+"/v1/groups/g1/records", nil, "", &e); code != 400 {
		t.Errorf("records without a topic: %d", code)
	}
}

// Scrape after a commit: the group's committed offset, lag in records and in seconds
// (from the record timestamps), and the time until retention overtakes it.
func TestGroupLagMetrics(t *testing.T) {
	_, base := startBroker(t, admin.Config{})
	createTopic(t, base, "lagt", 1)
	now := time.Now().UnixMilli()
	for i, ts := range []int64{now - 60_000, now - 30_000, now} {
		if code := call(t, "POST", base+"/v1/topics/lagt/records", nil, fmt.Sprintf(`{"value": "v%d", "timestamp": %d}`, i, ts), nil); code != http.StatusAccepted {
			t.Fatalf("produce %d: %d", i, code)
		}
	}
	if code := call(t, "POST", base+"/v1/groups/lagging/offsets", nil, `{"topic": "lagt", "offsets": {"0": 1}}`, nil); code != http.StatusNoContent {
		t.Fatalf("commit: %d", code)
	}
	m, err := scrape.Fetch(t.Context(), http.DefaultClient, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"group", "lagging", "topic", "lagt", "partition", "0"}
	want := map[string]float64{"ringlog_group_committed_offset": 1, "ringlog_group_lag_records": 2, "ringlog_group_lag_seconds": 30}
	for name, w := range want {
		if v, ok := m.Value(name, labels...); !ok || v != w {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, w)
		}
	}
	week := float64(7 * 24 * 3600)
	if v, _ := m.Value("ringlog_group_retention_overtake_seconds", labels...); v > week-30 || v < week-120 || math.IsInf(v, 0) {
		t.Errorf("retention overtakes in %v s, want about a week (retention.ms default) minus 30 s", v)
	}
	if v, ok := m.Value("ringlog_group_scrape_error"); !ok || v != 0 {
		t.Errorf("group scrape error %v (present %v)", v, ok)
	}
}

// A binary group member consumes what HTTP produced and commits; the HTTP lag endpoint and
// the lag series show its committed offsets.
func TestBinaryGroupMemberLag(t *testing.T) {
	b, base := startBroker(t, admin.Config{})
	createTopic(t, base, "members", 1)
	for i := range 5 {
		if code := call(t, "POST", base+"/v1/topics/members/records", nil, fmt.Sprintf(`{"value": "v%d"}`, i), nil); code != http.StatusAccepted {
			t.Fatalf("produce %d: %d", i, code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := b.Client.NewGroupConsumer(client.GroupConfig{Group: "members-g", AutoOffsetReset: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	g.Subscribe("members")
	for got := 0; got < 5; {
		recs, err := g.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += len(recs)
	}
	if err := g.CommitSync(ctx); err != nil {
		t.Fatal(err)
	}
	if code := call(t, "POST", base+"/v1/topics/members/records", nil, `{"value": "late"}`, nil); code != http.StatusAccepted {
		t.Fatalf("produce after the commit: %d", code)
	}
	var lag map[string]*int64
	if code := call(t, "GET", base+"/v1/groups/members-g/lag?topic=members", nil, "", &lag); code != 200 || lag["0"] == nil || *lag["0"] != 1 {
		t.Fatalf("lag: %d %v, want 1", code, lag)
	}
	m, err := scrape.Fetch(ctx, http.DefaultClient, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Value("ringlog_group_committed_offset", "group", "members-g", "topic", "members", "partition", "0"); v != 5 {
		t.Errorf("committed offset %v, want 5", v)
	}
	if v, _ := m.Value("ringlog_group_lag_records", "group", "members-g", "topic", "members", "partition", "0"); v != 1 {
		t.Errorf("lag %v, want 1", v)
	}
	// A member-less HTTP commit into a group with a live member is refused with its code.
	var e apiError
	if code := call(t, "POST", base+"/v1/groups/members-g/offsets", nil, `{"topic": "members", "offsets": {"0": 6}}`, &e); code != http.StatusConflict || e.Error.Name == "" {
		t.Errorf("HTTP commit into a group with members: %d %+v", code, e)
	}
}
