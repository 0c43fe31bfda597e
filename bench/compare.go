package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Row is one line of a side-by-side comparison.
type Row struct {
	Metric       string
	A, B         float64
	Unit         string
	HigherBetter bool
}

// Ratio is A/B, or 0 when B is 0 (nothing to compare against).
func (r Row) Ratio() float64 {
	if r.B == 0 {
		return 0
	}
	return r.A / r.B
}

// Better names the better side ("A", "B", "=" or "" when either side is missing).
func (r Row) Better() string {
	if r.A == 0 || r.B == 0 {
		return ""
	}
	if r.A == r.B {
		return "="
	}
	if (r.A > r.B) == r.HigherBetter {
		return "A"
	}
	return "B"
}

// CompareRows lists the figures two results are compared on.
func CompareRows(a, b *Result) []Row {
	rows := []Row{
		{"publish msg/s", a.Publish.MsgPerSec, b.Publish.MsgPerSec, "msg/s", true},
		{"publish MB/s", a.Publish.MBPerSec, b.Publish.MBPerSec, "MB/s", true},
		{"consume msg/s", a.Consume.MsgPerSec, b.Consume.MsgPerSec, "msg/s", true},
		{"consume MB/s", a.Consume.MBPerSec, b.Consume.MBPerSec, "MB/s", true},
	}
	latencies := []struct {
		name string
		a, b Summary
	}{
		{"publish latency", a.PublishLatency, b.PublishLatency},
		{"publish delay", a.PublishDelay, b.PublishDelay},
		{"end-to-end latency", a.EndToEnd, b.EndToEnd},
	}
	for _, l := range latencies {
		if l.a.Count == 0 && l.b.Count == 0 {
			continue
		}
		rows = append(rows,
			Row{l.name + " p50", l.a.P50Us, l.b.P50Us, "µs", false},
			Row{l.name + " p99", l.a.P99Us, l.b.P99Us, "µs", false},
			Row{l.name + " p99.9", l.a.P999Us, l.b.P999Us, "µs", false},
			Row{l.name + " p99.99", l.a.P9999Us, l.b.P9999Us, "µs", false},
			Row{l.name + " max", l.a.MaxUs, l.b.MaxUs, "µs", false},
		)
	}
	if a.Backlog != nil || b.Backlog != nil {
		ab, bb := a.Backlog, b.Backlog
		if ab == nil {
			ab = &Backlog{}
		}
		if bb == nil {
			bb = &Backlog{}
		}
		rows = append(rows,
			Row{"backlog read MB/s", ab.BacklogReadMBPerSec, bb.BacklogReadMBPerSec, "MB/s", true},
			Row{"caught up after", ab.CaughtUpSeconds, bb.CaughtUpSeconds, "s", false},
			Row{"broker CPU-s per GB of backlog", ab.BrokerCPUPerGB, bb.BrokerCPUPerGB, "s/GB", false},
		)
	}
	rows = append(rows,
		Row{"broker CPU-s per GB moved", a.BrokerCPU.PerGBMoved, b.BrokerCPU.PerGBMoved, "s/GB", false},
		Row{"bench process CPU-s", a.BrokerCPU.BenchSeconds, b.BrokerCPU.BenchSeconds, "s", false})
	rows = append(rows, Row{"broker RSS max", float64(a.BrokerRSS.MaxBytes) / (1 << 20), float64(b.BrokerRSS.MaxBytes) / (1 << 20), "MiB", false})
	return rows
}

// WriteComparison prints the side-by-side table; the ratio column is A/B.
func WriteComparison(w io.Writer, nameA, nameB string, a, b *Result) error {
	var out strings.Builder
	fmt.Fprintf(&out, "A: %s (%s, %s)\nB: %s (%s, %s)\n", nameA, a.Driver.Name, a.Workload.Name, nameB, b.Driver.Name, b.Workload.Name)
	if a.Hardware.Machine() != b.Hardware.Machine() {
		fmt.Fprintf(&out, "warning: different hardware\n  A: %s\n  B: %s\n", a.Hardware, b.Hardware)
	} else {
		fmt.Fprintf(&out, "hardware: %s (load at start: A %.1f, B %.1f)\n", a.Hardware.Machine(), a.Hardware.LoadAverage, b.Hardware.LoadAverage)
	}
	if a.Workload.Name != b.Workload.Name {
		fmt.Fprintf(&out, "warning: different workloads (%s vs %s)\n", a.Workload.Name, b.Workload.Name)
	}
	out.WriteString("\n")
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\tA\tB\tA/B\tbetter\t")
	for _, row := range CompareRows(a, b) {
		ratio := "-"
		if row.Ratio() != 0 {
			ratio = formatRatio(row.Ratio())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", row.Metric, formatValue(row.A, row.Unit), formatValue(row.B, row.Unit), ratio, row.Better())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// formatRatio keeps three significant digits: 0.000312× is not 0.00×.
func formatRatio(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.3g×", r)
}

func formatValue(v float64, unit string) string {
	if v == 0 {
		return "-"
	}
	if unit == "µs" {
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2f s", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%.2f ms", v/1e3)
		default:
			return fmt.Sprintf("%.0f µs", v)
		}
	}
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM %s", v/1e6, unit)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk %s", v/1e3, unit)
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	default:
		return fmt.Sprintf("%.2f %s", v, unit)
	}
}

// WriteSummary prints one run's headline figures.
func WriteSummary(w io.Writer, r *Result) error {
	var out strings.Builder
	fmt.Fprintf(&out, "workload %s on %s %s (storage %s, I/O %s)\n", r.Workload.Name, r.Driver.Name, r.Driver.Version, r.Driver.StorageMode, r.Driver.IOBackend)
	fmt.Fprintf(&out, "hardware: %s\n", r.Hardware)
	fmt.Fprintf(&out, "measured %.1fs after %.1fs warm-up\n", r.TestSeconds, r.WarmupSeconds)
	fmt.Fprintf(&out, "publish  %12.0f msg/s %9.1f MB/s  (%d messages, %d errors)\n", r.Publish.MsgPerSec, r.Publish.MBPerSec, r.Publish.Messages, r.Errors.Publish)
	fmt.Fprintf(&out, "consume  %12.0f msg/s %9.1f MB/s  (%d messages)\n", r.Consume.MsgPerSec, r.Consume.MBPerSec, r.Consume.Messages)
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency µs\tcount\tp50\tp90\tp99\tp99.9\tp99.99\tmax\t")
	for _, l := range []NamedSummary{
		{Name: "publish", Summary: r.PublishLatency},
		{Name: "publish (from intended)", Summary: r.PublishLatencyIntended},
		{Name: "publish delay", Summary: r.PublishDelay},
		{Name: "end-to-end", Summary: r.EndToEnd},
	} {
		s := l.Summary
		if s.Count == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", l.Name, s.Count, s.P50Us, s.P90Us, s.P99Us, s.P999Us, s.P9999Us, s.MaxUs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if b := r.Backlog; b != nil {
		fmt.Fprintf(&out, "backlog  %s written in %.1fs; ", FormatBytes(b.WrittenBytes), b.FillSeconds)
		if b.BacklogReadSeconds > 0 {
			fmt.Fprintf(&out, "read in %.1fs (%.0f MB/s); ", b.BacklogReadSeconds, b.BacklogReadMBPerSec)
			if b.BrokerCPUPerGB > 0 {
				fmt.Fprintf(&out, "broker %.2f CPU-s per GB of backlog; ", b.BrokerCPUPerGB)
			}
		} else {
			out.WriteString("not fully read before the test ended; ")
		}
		if b.Drained {
			fmt.Fprintf(&out, "caught up with the head after %.1fs\n", b.CaughtUpSeconds)
		} else {
			out.WriteString("never caught up with the head\n")
		}
	}
	fmt.Fprintf(&out, "RSS (%s, pid %d): first %s, max %s, last %s, growth %s\n", r.BrokerRSS.Source, r.BrokerRSS.PID,
		FormatBytes(r.BrokerRSS.FirstBytes), FormatBytes(r.BrokerRSS.MaxBytes), FormatBytes(r.BrokerRSS.LastBytes), signedBytes(r.BrokerRSS.GrowthBytes))
	if c := r.BrokerCPU; c.BrokerSeconds > 0 {
		fmt.Fprintf(&out, "CPU (%s, pid %d): broker %.2f s, bench process %.2f s; broker CPU-s per GB ingested %.2f, served %.2f, moved %.2f\n",
			c.Source, c.PID, c.BrokerSeconds, c.BenchSeconds, c.PerGBIngested, c.PerGBServed, c.PerGBMoved)
	}
	if len(r.PartitionShares) > 1 {
		hottest, index := 0.0, 0
		for i, share := range r.PartitionShares {
			if share > hottest {
				hottest, index = share, i
			}
		}
		fmt.Fprintf(&out, "keys %s: hottest partition %d took %.1f%% of messages (uniform: %.1f%%)\n",
			r.Workload.KeyDistribution, index, hottest*100, 100/float64(len(r.PartitionShares)))
	}
	if r.LoopbackMBps > 0 {
		fmt.Fprintf(&out, "loopback TCP in the same run: %.0f MB/s\n", r.LoopbackMBps)
	}
	for _, note := range r.Notes {
		fmt.Fprintf(&out, "note: %s\n", note)
	}
	_, err := io.WriteString(w, out.String())
	return err
}

func signedBytes(n int64) string {
	if n < 0 {
		return "-" + FormatBytes(-n)
	}
	return "+" + FormatBytes(n)
}

// WritePlots renders a run's charts into dir as <prefix>-throughput.svg, -latency.svg and,
// for catch-up runs, -lag.svg. It returns the files written.
func WritePlots(dir, prefix string, r *Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	caption := fmt.Sprintf("%s on %s — %s", r.Workload.Name, r.Driver.Name, r.Hardware)
	charts := map[string]Chart{
		"throughput": ThroughputChart("Throughput over time: "+r.Workload.Name, caption, map[string][]Sample{r.Driver.Name: r.Samples}),
		"latency": LatencyChart("Latency by percentile: "+r.Workload.Name, caption, []NamedSummary{
			{Name: "publish", Summary: r.PublishLatency},
			{Name: "publish delay", Summary: r.PublishDelay, Dashed: true},
			{Name: "end-to-end", Summary: r.EndToEnd},
		}),
	}
	if r.Backlog != nil {
		charts["lag"] = LagChart("Consumer lag: "+r.Workload.Name, caption, r.Samples)
	}
	if r.BrokerRSS.MaxBytes > 0 {
		charts["rss"] = RSSChart("Broker memory: "+r.Workload.Name, caption, r.Samples)
	}
	var files []string
	for _, name := range sortedKeys(charts) {
		path := filepath.Join(dir, prefix+"-"+name+".svg")
		if err := os.WriteFile(path, charts[name].SVG(), 0o644); err != nil {
			return files, fmt.Errorf("plots: %w", err)
		}
		files = append(files, path)
	}
	return files, nil
}

// WriteComparisonPlots renders two runs of one workload on shared axes:
// <prefix>-throughput.svg (both systems' publish and consume MB/s over time) and
// <prefix>-latency.svg (both systems' publish and end-to-end percentile curves).
func WriteComparisonPlots(dir, prefix string, a, b *Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	caption := fmt.Sprintf("%s: %s vs %s — %s", a.Workload.Name, a.Driver.Name, b.Driver.Name, a.Hardware.Machine())
	charts := map[string]Chart{
		"throughput": ThroughputChart("Throughput over time: "+a.Workload.Name, caption,
			map[string][]Sample{a.Driver.Name: a.Samples, b.Driver.Name: b.Samples}),
		"latency": LatencyChart("Latency by percentile: "+a.Workload.Name, caption, []NamedSummary{
			{Name: a.Driver.Name + " publish", Summary: a.PublishLatency, Color: seriesColors[0]},
			{Name: a.Driver.Name + " end-to-end", Summary: a.EndToEnd, Dashed: true, Color: seriesColors[0]},
			{Name: b.Driver.Name + " publish", Summary: b.PublishLatency, Color: seriesColors[1]},
			{Name: b.Driver.Name + " end-to-end", Summary: b.EndToEnd, Dashed: true, Color: seriesColors[1]},
		}),
	}
	var files []string
	for _, name := range sortedKeys(charts) {
		path := filepath.Join(dir, prefix+"-"+name+".svg")
		if err := os.WriteFile(path, charts[name].SVG(), 0o644); err != nil {
			return files, fmt.Errorf("plots: %w", err)
		}
		files = append(files, path)
	}
	return files, nil
}
