package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// The operator's CLI on the real binaries and broker: the global --broker before the
// command, headers from --header, kcat --format, and consume --format json piped into
// produce --input json (binary keys, headers and timestamps survive the copy).
func TestCLIFormatsAndHeaders(t *testing.T) {
	b := startBroker(t)
	ok(t, "", nil, "--broker", b.addr, "topic", "create", "src", "--partitions", "2")
	ok(t, "", nil, "--broker", b.addr, "topic", "create", "dst", "--partitions", "2")
	ok(t, "k1,v1\nk2,v2\n", nil, "--broker", b.addr, "produce", "src", "--key-separator", ",", "--header", "source=e2e", "--header", "n=1")
	ok(t, `{"key":"/wD+","key_encoding":"base64","value":"bin","headers":[{"key":"raw","value":"gA==","value_encoding":"base64"}],"partition":1,"timestamp":1600000000000}`+"\n",
		nil, "--broker", b.addr, "produce", "src", "--input", "json")

	res := ok(t, "", nil, "consume", "src", "--broker", b.addr, "--exit-at-end", "--format", `%k=%s [%h]\n`)
	for _, want := range []string{"k1=v1 [source=e2e,n=1]\n", "k2=v2 [source=e2e,n=1]\n", "\xff\x00\xfe=bin [raw=\x80]\n"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("--format output lacks %q:\n%q", want, res.stdout)
		}
	}

	exported := ok(t, "", nil, "--broker", b.addr, "consume", "src", "--exit-at-end", "--format", "json").stdout
	ok(t, exported, nil, "--broker", b.addr, "produce", "dst", "--input", "json")
	copied := ok(t, "", nil, "--broker", b.addr, "consume", "dst", "--exit-at-end", "--format", "json").stdout
	records := func(text string) map[string]string {
		out := map[string]string{}
		for line := range strings.Lines(text) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("consume --format json line does not parse: %v\n%s", err, line)
			}
			key, _ := m["key"].(string)
			delete(m, "topic")
			delete(m, "offset")
			canonical, _ := json.Marshal(m)
			out[key] = string(canonical)
		}
		return out
	}
	src, dst := records(exported), records(copied)
	if len(src) != 3 || len(dst) != 3 {
		t.Fatalf("%d records exported, %d copied; want 3 and 3\n%s\n%s", len(src), len(dst), exported, copied)
	}
	for key, want := range src {
		if dst[key] != want {
			t.Errorf("record %q: copied as %s, want %s", key, dst[key], want)
		}
	}
	if !strings.Contains(exported, `"key":"/wD+","key_encoding":"base64"`) || !strings.Contains(exported, `"timestamp":1600000000000`) {
		t.Errorf("export lacks the binary key or the set timestamp:\n%s", exported)
	}
}
