package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Chart is a line chart rendered as a standalone SVG file (no scripts, no external fonts),
// so it opens in any browser and diffs as text.
type Chart struct {
	Title   string
	XLabel  string
	YLabel  string
	LogY    bool
	XTicks  []Tick // nil = automatic
	Series  []Series
	Width   int // pixels; 0 = 860
	Height  int // pixels; 0 = 420
	Caption string
	// XFromZero starts the x axis at 0 (time series) instead of at the first point.
	XFromZero bool
}

// Tick is a labelled axis position.
type Tick struct {
	At    float64
	Label string
}

// Series is one line.
type Series struct {
	Name   string
	Points []Point
	Dashed bool
	Color  string // "" = the next color of the palette
}

// Point is one (x, y).
type Point struct{ X, Y float64 }

var seriesColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

const (
	marginLeft   = 80
	marginRight  = 220
	marginTop    = 40
	marginBottom = 75
)

type axis struct {
	min, max float64
	log      bool
	ticks    []Tick
}

func (a axis) scale(v float64, pixels float64) float64 {
	lo, hi := a.min, a.max
	if a.log {
		v, lo, hi = math.Log10(math.Max(v, a.min)), math.Log10(lo), math.Log10(hi)
	}
	if hi == lo {
		return 0
	}
	return (v - lo) / (hi - lo) * pixels
}

// SVG renders the chart.
func (c Chart) SVG() []byte {
	width, height := c.Width, c.Height
	if width == 0 {
		width = 860
	}
	if height == 0 {
		height = 420
	}
	plotW, plotH := float64(width-marginLeft-marginRight), float64(height-marginTop-marginBottom)
	xAxis, yAxis := c.axes()
	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, esc(c.Title))
	fmt.Fprintf(&b, `<g transform="translate(%d,%d)">`+"\n", marginLeft, marginTop)
	for _, tick := range yAxis.ticks {
		y := plotH - yAxis.scale(tick.At, plotH)
		fmt.Fprintf(&b, `<line x1="0" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", plotW, y, y)
		fmt.Fprintf(&b, `<text x="-6" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", y, esc(tick.Label))
	}
	for _, tick := range xAxis.ticks {
		x := xAxis.scale(tick.At, plotW)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="0" y2="%.1f" stroke="#eee"/>`+"\n", x, x, plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, plotH+18, esc(tick.Label))
	}
	fmt.Fprintf(&b, `<rect width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", plotW/2, plotH+36, esc(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(-60,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", plotH/2, esc(c.YLabel))
	for i, s := range c.Series {
		color := s.Color
		if color == "" {
			color = seriesColors[i%len(seriesColors)]
		}
		var path strings.Builder
		for j, p := range s.Points {
			if math.IsNaN(p.Y) || math.IsInf(p.Y, 0) || (yAxis.log && p.Y <= 0) {
				continue
			}
			cmd := "L"
			if j == 0 || path.Len() == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, xAxis.scale(p.X, plotW), plotH-yAxis.scale(p.Y, plotH))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6,4"`
		}
		if path.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.TrimSpace(path.String()), color, dash)
		}
		ly := float64(i * 20)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", plotW+12, plotW+36, ly+6, ly+6, color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>`+"\n", plotW+42, ly+6, esc(s.Name))
	}
	b.WriteString("</g>\n")
	// The caption (workload and hardware) goes on up to two lines under the x label.
	for i, line := range wrapCaption(c.Caption, (width-marginLeft)/6, 2) {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">%s</text>`+"\n", 10, height-20+i*12, esc(line))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func (c Chart) axes() (axis, axis) {
	xs, ys := axis{min: math.Inf(1), max: math.Inf(-1)}, axis{min: math.Inf(1), max: math.Inf(-1), log: c.LogY}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if math.IsNaN(p.Y) || math.IsInf(p.Y, 0) || (c.LogY && p.Y <= 0) {
				continue
			}
			xs.min, xs.max = math.Min(xs.min, p.X), math.Max(xs.max, p.X)
			ys.min, ys.max = math.Min(ys.min, p.Y), math.Max(ys.max, p.Y)
		}
	}
	for _, t := range c.XTicks {
		xs.min, xs.max = math.Min(xs.min, t.At), math.Max(xs.max, t.At)
	}
	if c.XFromZero {
		xs.min = math.Min(xs.min, 0)
	}
	if math.IsInf(xs.min, 1) { // no data
		xs.min, xs.max, ys.min, ys.max = 0, 1, 0, 1
		if c.LogY {
			ys.min, ys.max = 1, 10
		}
	}
	if xs.max == xs.min {
		xs.max = xs.min + 1
	}
	if c.XTicks != nil {
		xs.ticks = c.XTicks
	} else {
		for _, tick := range linearTicks(xs.min, xs.max) {
			if tick.At >= xs.min-1e-9 && tick.At <= xs.max+1e-9 { // never draw outside the plot
				xs.ticks = append(xs.ticks, tick)
			}
		}
	}
	if c.LogY {
		ys.min = math.Pow(10, math.Floor(math.Log10(ys.min)))
		ys.max = math.Pow(10, math.Ceil(math.Log10(ys.max)))
		if ys.max <= ys.min {
			ys.max = ys.min * 10
		}
		for v := ys.min; v <= ys.max*1.0001; v *= 10 {
			ys.ticks = append(ys.ticks, Tick{At: v, Label: formatMicros(v)})
		}
	} else {
		ys.min = math.Min(0, ys.min)
		if ys.max <= ys.min {
			ys.max = ys.min + 1
		}
		ys.ticks = linearTicks(ys.min, ys.max)
		ys.max = math.Max(ys.max, ys.ticks[len(ys.ticks)-1].At)
	}
	return xs, ys
}

// linearTicks picks about six round ticks (1, 2, 5 × 10^k steps) covering [lo, hi].
func linearTicks(lo, hi float64) []Tick {
	span := hi - lo
	raw := span / 6
	magnitude := math.Pow(10, math.Floor(math.Log10(raw)))
	step := magnitude
	for _, m := range []float64{1, 2, 5, 10} {
		if m*magnitude >= raw {
			step = m * magnitude
			break
		}
	}
	var ticks []Tick
	for v := math.Floor(lo/step) * step; v <= hi+step*0.999 && len(ticks) < 50; v += step {
		ticks = append(ticks, Tick{At: v, Label: trimFloat(v)})
	}
	return ticks
}

func trimFloat(v float64) string {
	if math.Abs(v) >= 1e6 {
		return fmt.Sprintf("%.3gM", v/1e6)
	}
	if math.Abs(v) >= 1e4 {
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.4g", v)
}

func formatMicros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%gs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%gms", us/1e3)
	default:
		return fmt.Sprintf("%gµs", us)
	}
}

// percentileX maps a percentile to the "number of nines" axis: 90 → 1, 99 → 2, 99.9 → 3.
// The maximum (100) sits half a step right of p99.999.
func percentileX(p float64) float64 {
	if p >= 100 {
		return 5.5
	}
	return math.Min(-math.Log10(1-p/100), 5)
}

var percentileTicks = []Tick{{0, "p0"}, {1, "p90"}, {2, "p99"}, {3, "p99.9"}, {4, "p99.99"}, {5, "p99.999"}, {5.5, "max"}}

// LatencyChart plots percentile curves of the named summaries.
func LatencyChart(title, caption string, named []NamedSummary) Chart {
	chart := Chart{Title: title, XLabel: "percentile", YLabel: "latency (log scale)", LogY: true, XTicks: percentileTicks, Caption: caption}
	for _, n := range named {
		if n.Summary.Count == 0 {
			continue
		}
		s := Series{Name: n.Name, Dashed: n.Dashed, Color: n.Color}
		for _, c := range n.Summary.Curve {
			s.Points = append(s.Points, Point{X: percentileX(c.Percentile), Y: math.Max(c.ValueUs, 0.001)})
		}
		chart.Series = append(chart.Series, s)
	}
	return chart
}

// NamedSummary labels a histogram summary for a plot.
type NamedSummary struct {
	Name    string
	Summary Summary
	Dashed  bool
	Color   string // "" = the next color of the palette
}

// ThroughputChart plots publish and consume MB/s over time.
func ThroughputChart(title, caption string, runs map[string][]Sample) Chart {
	chart := Chart{Title: title, XLabel: "seconds since start", YLabel: "MB/s", Caption: caption, XFromZero: true}
	for index, name := range sortedKeys(runs) {
		prefix := name + " "
		if len(runs) == 1 {
			prefix = "" // the caption names the system
		}
		color := seriesColors[index%len(seriesColors)]
		pub := Series{Name: prefix + "publish", Color: color}
		con := Series{Name: prefix + "consume", Dashed: true, Color: color}
		for _, s := range runs[name] {
			pub.Points = append(pub.Points, Point{X: s.Seconds, Y: s.PublishMBPerS})
			con.Points = append(con.Points, Point{X: s.Seconds, Y: s.ConsumeMBPerS})
		}
		chart.Series = append(chart.Series, pub, con)
	}
	return chart
}

// LagChart plots consumer lag (messages) over time.
func LagChart(title, caption string, samples []Sample) Chart {
	chart := Chart{Title: title, XLabel: "seconds since start", YLabel: "consumer lag (messages)", Caption: caption, XFromZero: true}
	s := Series{Name: "lag"}
	for _, sample := range samples {
		s.Points = append(s.Points, Point{X: sample.Seconds, Y: float64(sample.LagMessages)})
	}
	chart.Series = append(chart.Series, s)
	return chart
}

// RSSChart plots the broker's resident set over time.
func RSSChart(title, caption string, samples []Sample) Chart {
	chart := Chart{Title: title, XLabel: "seconds since start", YLabel: "broker RSS (MiB)", Caption: caption, XFromZero: true}
	s := Series{Name: "RSS"}
	for _, sample := range samples {
		if sample.BrokerRSSBytes > 0 {
			s.Points = append(s.Points, Point{X: sample.Seconds, Y: float64(sample.BrokerRSSBytes) / (1 << 20)})
		}
	}
	chart.Series = append(chart.Series, s)
	return chart
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// wrapCaption splits text into at most lines lines of about width characters, breaking at
// spaces; the last line is cut with an ellipsis if the text is longer.
func wrapCaption(text string, width, lines int) []string {
	var out []string
	words := strings.Fields(text)
	current := ""
	for i, word := range words {
		if current != "" && len([]rune(current))+1+len([]rune(word)) > width {
			out = append(out, current)
			current = ""
			if len(out) == lines-1 {
				rest := strings.Join(words[i:], " ")
				if len([]rune(rest)) > width {
					rest = string([]rune(rest)[:width-1]) + "…"
				}
				return append(out, rest)
			}
		}
		if current != "" {
			current += " "
		}
		current += word
	}
	if current != "" {
		out = append(out, current)
	}
	return out
}
