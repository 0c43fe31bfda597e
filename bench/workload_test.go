package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShippedWorkloadsParse(t *testing.T) {
	paths, err := filepath.Glob("workloads/*")
	if err != nil || len(paths) < 6 {
		t.Fatalf("workloads: %v %v", paths, err)
	}
	names := map[string]Workload{}
	for _, path := range paths {
		w, err := LoadWorkload(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		names[w.Name] = w
	}
	for _, want := range []string{"max-rate-100b", "max-rate-1kib", "fixed-rate-latency-1kib", "catch-up-1kib", "hot-key-skew"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no shipped workload %s", want)
		}
	}
	if w := names["fixed-rate-latency-1kib"]; w.ProducerRate != 50000 || w.MessageSize != 1024 {
		t.Errorf("fixed-rate workload: rate %d size %d", w.ProducerRate, w.MessageSize)
	}
	if w := names["catch-up-1kib"]; w.BacklogSize != 2<<30 || w.ProducerRate == 0 {
		t.Errorf("catch-up workload: backlog %d rate %d", w.BacklogSize, w.ProducerRate)
	}
	if w := names["hot-key-skew"]; w.KeyDistribution != KeysHot || w.HotKeyShare != 0.8 {
		t.Errorf("hot-key workload: %s %v", w.KeyDistribution, w.HotKeyShare)
	}
	if w := names["max-rate-100b"]; w.MessageSize != 100 || w.Duration.D() != time.Minute || w.Warmup.D() != 10*time.Second {
		t.Errorf("max-rate-100b: %+v", w)
	}
}

const validYAML = `
topics: 1
partitionsPerTopic: 4
messageSize: 1KiB
producers: 1
consumers: 1
producerRate: 0
warmup: 1s
duration: 5s
`

func TestParseWorkloadDefaultsAndJSON(t *testing.T) {
	w, err := ParseWorkload([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	if w.KeyDistribution != KeysNone || w.Acks != "1" || w.Compression != "none" || w.Durability != "none" || w.MaxInFlight != maxInFlightDefault {
		t.Fatalf("defaults not filled: %+v", w)
	}
	j, err := ParseWorkload([]byte(`{"topics":1,"partitionsPerTopic":4,"messageSize":1024,"producers":1,"consumers":1,"producerRate":0,"warmup":"1s","duration":"5s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if j != w {
		t.Fatalf("JSON and YAML disagree:\n%+v\n%+v", j, w)
	}
}

func TestParseWorkloadRejectsBadInput(t *testing.T) {
	replace := func(old, new string) string { return strings.Replace(validYAML, old, new, 1) }
	cases := map[string]struct{ text, wantInError string }{
		"empty":                   {"", "empty"},
		"unknown field":           {validYAML + "partitions: 3\n", "partitions"},
		"not yaml":                {"topics: [1, 2", "bad workload"},
		"bad duration":            {replace("duration: 5s", "duration: 5 minutes"), "duration"},
		"zero duration":           {replace("duration: 5s", "duration: 0s"), "duration"},
		"bad size":                {replace("messageSize: 1KiB", "messageSize: big"), "bad byte size"},
		"tiny message":            {replace("messageSize: 1KiB", "messageSize: 8"), "messageSize"},
		"huge message":            {replace("messageSize: 1KiB", "messageSize: 1GiB"), "messageSize"},
		"no topics":               {replace("topics: 1", "topics: 0"), "topics"},
		"too many partitions":     {replace("partitionsPerTopic: 4", "partitionsPerTopic: 1000000"), "partitionsPerTopic"},
		"hot without share":       {validYAML + "keyDistribution: hot\n", "hotKeyShare"},
		"share above one":         {validYAML + "keyDistribution: hot\nhotKeyShare: 1.5\n", "hotKeyShare"},
		"share without hot":       {validYAML + "hotKeyShare: 0.5\n", "hotKeyShare"},
		"unknown distribution":    {validYAML + "keyDistribution: zipf\n", "keyDistribution"},
		"more consumers":          {replace("consumers: 1", "consumers: 5"), "consumers 5"},
		"nobody":                  {strings.NewReplacer("consumers: 1", "consumers: 0", "producers: 1", "producers: 0").Replace(validYAML), "no producers"},
		"negative rate":           {replace("producerRate: 0", "producerRate: -5"), "producerRate"},
		"backlog at max rate":     {validYAML + "backlogSize: 1GiB\n", "backlogSize"},
		"bad acks":                {validYAML + "acks: \"2\"\n", "acks"},
		"bad compression":         {validYAML + "compression: brotli\n", "compression"},
		"bad durability":          {validYAML + "durability: sometimes\n", "durability"},
		"tiny retention":          {validYAML + "retentionBytes: 4KiB\n", "retentionBytes"},
		"negative replication":    {validYAML + "replicationFactor: -1\n", "replicationFactor"},
		"huge replication":        {validYAML + "replicationFactor: 17\n", "replicationFactor"},
		"json trailing":           {`{"topics":1} {"topics":2}`, "trailing"},
		"json unknown field":      {`{"topic":1}`, "topic"},
		"json duration as number": {`{"duration":5}`, "duration"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseWorkload([]byte(tc.text))
			if !errors.Is(err, ErrBadWorkload) && !errors.Is(err, ErrBadSize) {
				t.Fatalf("error %v is not ErrBadWorkload", err)
			}
			if !strings.Contains(err.Error(), tc.wantInError) {
				t.Fatalf("error %q does not mention %q", err, tc.wantInError)
			}
		})
	}
}

func TestLoadWorkloadBoundsFileSizeAndNamesFromFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", workloadFileBytesMax+10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWorkload(big); !errors.Is(err, ErrBadWorkload) {
		t.Fatalf("oversized file: %v", err)
	}
	named := filepath.Join(dir, "my-run.yaml")
	if err := os.WriteFile(named, []byte(validYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := LoadWorkload(named)
	if err != nil || w.Name != "my-run" {
		t.Fatalf("name %q err %v", w.Name, err)
	}
	if _, err := LoadWorkload(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("missing file loaded")
	}
}

func FuzzParseWorkload(f *testing.F) {
	f.Add([]byte(validYAML))
	f.Add([]byte(`{"topics":1,"partitionsPerTopic":4,"messageSize":"1KiB","producers":1,"duration":"1s"}`))
	f.Add([]byte("backlogSize: 99999999999TiB\n"))
	f.Add([]byte("messageSize: [1, 2]\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := ParseWorkload(data)
		if err != nil {
			return
		}
		if verr := w.Validate(); verr != nil {
			t.Fatalf("parsed workload fails validation: %v", verr)
		}
	})
}
