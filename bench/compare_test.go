package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleResult(driver string, mbps, p99Us float64) *Result {
	lat := NewLatency()
	lat.Record(1000)
	s := lat.Summarize()
	s.P50Us, s.P99Us = p99Us/2, p99Us
	return &Result{
		Version: resultFormat, Driver: DriverInfo{Name: driver}, Workload: Workload{Name: "w"},
		Publish: Throughput{MBPerSec: mbps, MsgPerSec: mbps * 1000}, Consume: Throughput{MBPerSec: mbps},
		PublishLatency: s, EndToEnd: s, BrokerRSS: RSSStats{MaxBytes: 100 << 20},
		Samples: []Sample{{Seconds: 1, PublishMBPerS: mbps}, {Seconds: 2, PublishMBPerS: mbps}},
	}
}

func TestCompareRowsRatiosAndBetter(t *testing.T) {
	a, b := sampleResult("ringlog", 500, 200), sampleResult("nats", 100, 1000)
	rows := CompareRows(a, b)
	byName := map[string]Row{}
	for _, r := range rows {
		byName[r.Metric] = r
	}
	if r := byName["publish MB/s"]; r.Ratio() != 5 || r.Better() != "A" {
		t.Fatalf("publish MB/s row %+v ratio %v better %s", r, r.Ratio(), r.Better())
	}
	if r := byName["publish latency p99"]; r.Ratio() != 0.2 || r.Better() != "A" {
		t.Fatalf("p99 row %+v ratio %v better %s", r, r.Ratio(), r.Better())
	}
	if _, ok := byName["publish delay p99"]; ok {
		t.Fatal("publish delay rows present with no delay recorded on either side")
	}
	if (Row{A: 1, B: 0}).Ratio() != 0 || (Row{A: 1, B: 0}).Better() != "" || (Row{A: 2, B: 2, HigherBetter: true}).Better() != "=" {
		t.Fatal("edge rows")
	}
	var out strings.Builder
	if err := WriteComparison(&out, "a.json", "b.json", a, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "5×") || !strings.Contains(out.String(), "0.2×") || strings.Contains(out.String(), "warning") {
		t.Fatalf("comparison lacks ratios:\n%s", out.String())
	}
}

func TestResultRoundTripAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	r := sampleResult("mem", 1, 2)
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Publish != r.Publish || back.PublishLatency.P99Us != r.PublishLatency.P99Us {
		t.Fatalf("round trip changed the result: %+v", back.Publish)
	}
	for name, data := range map[string]string{"garbage": "{nope", "other format": `{"format":"x"}`, "empty": ""} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(bad, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadResult(bad); !errors.Is(err, ErrBadResult) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzDecodeResult(f *testing.F) {
	f.Add([]byte(`{"format":"ringlog-bench-result/1","publish":{"mb_per_s":1}}`))
	f.Add([]byte(`{"format":"ringlog-bench-result/1","samples":[{"t":1}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeResult(data)
		if err != nil {
			if !errors.Is(err, ErrBadResult) {
				t.Fatalf("error %v is not ErrBadResult", err)
			}
			return
		}
		_ = CompareRows(r, r)
	})
}

func TestFormatting(t *testing.T) {
	for in, want := range map[float64]string{5: "5×", 0.000312: "0.000312×", 1234: "1234×", 1.23456: "1.23×"} {
		if got := formatRatio(in); got != want {
			t.Errorf("formatRatio(%v) = %q, want %q", in, got, want)
		}
	}
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{{950, "µs", "950 µs"}, {11510, "µs", "11.51 ms"}, {2.5e6, "µs", "2.50 s"}, {0, "µs", "-"}, {2e6, "msg/s", "2.00M msg/s"}} {
		if got := formatValue(tc.v, tc.unit); got != tc.want {
			t.Errorf("formatValue(%v, %s) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

func TestComparisonWarnsOnDifferentMachinesOnly(t *testing.T) {
	a, b := sampleResult("x", 1, 1), sampleResult("y", 1, 1)
	a.Hardware.LoadAverage, b.Hardware.LoadAverage = 1, 9
	var out strings.Builder
	if err := WriteComparison(&out, "a", "b", a, b); err != nil || strings.Contains(out.String(), "warning: different hardware") {
		t.Fatalf("load alone triggered a hardware warning: %v\n%s", err, out.String())
	}
	b.Hardware.Cores = 64
	out.Reset()
	if err := WriteComparison(&out, "a", "b", a, b); err != nil || !strings.Contains(out.String(), "warning: different hardware") {
		t.Fatalf("no warning for different machines: %v\n%s", err, out.String())
	}
}
