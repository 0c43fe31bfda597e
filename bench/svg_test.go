package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parseSVG checks that data is well-formed XML with an <svg> root and returns the count of
// each element name.
func parseSVG(t *testing.T, data []byte) map[string]int {
	t.Helper()
	decoder := xml.NewDecoder(bytes.NewReader(data))
	elements := map[string]int{}
	root := ""
	for {
		token, err := decoder.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, data)
		}
		if start, ok := token.(xml.StartElement); ok {
			if root == "" {
				root = start.Name.Local
				if start.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root namespace %q", start.Name.Space)
				}
			}
			elements[start.Name.Local]++
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return elements
}

func TestLatencyChartIsWellFormedWithOneLinePerSeries(t *testing.T) {
	a, b := NewLatency(), NewLatency()
	for i := 1; i <= 1000; i++ {
		a.Record(100_000 * 1)
		b.Record(1000 * 1000 * 1)
	}
	chart := LatencyChart(`publish <&> "quotes"`, "caption & more", []NamedSummary{
		{Name: "publish", Summary: a.Summarize()},
		{Name: "end-to-end", Summary: b.Summarize(), Dashed: true},
		{Name: "empty", Summary: NewLatency().Summarize()},
	})
	data := chart.SVG()
	elements := parseSVG(t, data)
	if elements["path"] != 2 {
		t.Fatalf("%d paths for 2 non-empty series", elements["path"])
	}
	for _, label := range []string{"p99.9", "max", "publish &lt;&amp;&gt;", "end-to-end", "µs"} {
		if !bytes.Contains(data, []byte(label)) {
			t.Errorf("SVG lacks %q", label)
		}
	}
}

func TestThroughputChartAndEmptyChart(t *testing.T) {
	samples := []Sample{{Seconds: 1, PublishMBPerS: 100, ConsumeMBPerS: 90}, {Seconds: 2, PublishMBPerS: 120, ConsumeMBPerS: 121}}
	elements := parseSVG(t, ThroughputChart("t", "c", map[string][]Sample{"x": samples}).SVG())
	if elements["path"] != 2 {
		t.Fatalf("%d paths, want publish and consume", elements["path"])
	}
	empty := parseSVG(t, Chart{Title: "nothing", LogY: true}.SVG())
	if empty["path"] != 0 || empty["svg"] != 1 {
		t.Fatalf("empty chart elements %v", empty)
	}
}

func TestAutoXTicksStayInsidePlot(t *testing.T) {
	chart := Chart{Series: []Series{{Name: "s", Points: []Point{{0, 1}, {630, 2}}}}}
	xs, _ := chart.axes()
	for _, tick := range xs.ticks {
		if tick.At < 0 || tick.At > 630 {
			t.Fatalf("tick %v outside [0, 630]", tick)
		}
	}
}

func TestLinearTicksCoverRange(t *testing.T) {
	for _, r := range [][2]float64{{0, 1}, {0, 937}, {3, 4}, {0, 1.2e6}} {
		ticks := linearTicks(r[0], r[1])
		if len(ticks) < 3 || len(ticks) > 13 || ticks[0].At > r[0] || ticks[len(ticks)-1].At < r[1] {
			t.Errorf("ticks for %v: %v", r, ticks)
		}
	}
}

func TestWrapCaption(t *testing.T) {
	lines := wrapCaption(strings.Repeat("word ", 100), 30, 2)
	if len(lines) != 2 || len([]rune(lines[1])) > 30 || !strings.HasSuffix(lines[1], "…") {
		t.Fatalf("wrapped %q", lines)
	}
}

func TestWritePlotsWritesWellFormedFiles(t *testing.T) {
	r := sampleResult("mem", 100, 200)
	r.Backlog = &Backlog{TargetBytes: 1}
	dir := t.TempDir()
	files, err := WritePlots(dir, "run", r)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 { // throughput, latency, lag (backlog), rss
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parseSVG(t, data)
		if filepath.Dir(f) != dir {
			t.Fatalf("%s outside %s", f, dir)
		}
	}
}

func TestWriteComparisonPlots(t *testing.T) {
	a, b := sampleResult("ringlog", 100, 200), sampleResult("nats", 20, 900)
	files, err := WriteComparisonPlots(t.TempDir(), "cmp", a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		elements := parseSVG(t, data)
		if elements["path"] != 4 || !bytes.Contains(data, []byte("ringlog")) || !bytes.Contains(data, []byte("nats")) {
			t.Fatalf("%s: %d lines, want 4 (two systems × two series)", f, elements["path"])
		}
	}
}
