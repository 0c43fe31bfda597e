package admin

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/ringlog/ringlog/internal/doccheck"
)

// exportedNames are the names of every metric the collector describes.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 128)
	(&collector{}).Describe(ch)
	close(ch)
	names := map[string]bool{}
	pattern := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		m := pattern.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
	}
	return names
}

// TestOperationsDocListsEveryMetric: docs/operations.md names every exported metric.
func TestOperationsDocListsEveryMetric(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range exportedNames(t) {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/operations.md does not describe %s", name)
		}
	}
}

// TestAlertRulesUseExportedMetrics: the example alert rules parse as YAML and name only
// metrics the broker exports (histograms by their _bucket series).
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "ringlog-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	names := exportedNames(t)
	count := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			count++
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("rule %+v lacks a name or an expression", r)
			}
			for _, m := range regexp.MustCompile(`ringlog_[a-z_]+`).FindAllString(r.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
				if !names[base] {
					t.Errorf("alert %s uses %s, which the broker does not export", r.Alert, m)
				}
			}
		}
	}
	if count < 10 {
		t.Errorf("%d rules parsed", count)
	}
}

// httpRequestsMetric is the one metric registered outside the collector (admin.go, Start).
const httpRequestsMetric = "ringlog_http_requests_total"

// docMetric is a metric name as the docs write it: ringlog_ and lower-case words, with
// shell brace alternatives (ringlog_recycle_{pooled,reused}_total).
var docMetric = regexp.MustCompile(`ringlog_[a-z0-9_{},]*[a-z0-9}]`)

// metricMentionProblems returns the metric names in the Markdown files under root (README.md
// and docs/, but not docs/benchmarks.md, whose measurements are records of past runs) that
// the broker does not export. A histogram's _bucket, _sum and _count series count as the
// histogram; a name followed by a grep in a command line may be a prefix of exported ones.
func metricMentionProblems(t *testing.T, root string, names map[string]bool) []string {
	t.Helper()
	var problems []string
	err := doccheck.CurrentDocLines(root, nil, func(f string, lines []string) {
		for i, line := range lines {
			for _, mention := range docMetric.FindAllString(line, -1) {
				for _, name := range expandBraces(mention) {
					if !metricExists(name, names, strings.Contains(line, "grep "+name)) {
						problems = append(problems, fmt.Sprintf("%s:%d: %s is not a metric the broker exports", f, i+1, name))
					}
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// metricExists says whether name (or the histogram it is a series of) is exported, or with
// prefix set whether an exported name starts with it.
func metricExists(name string, names map[string]bool, prefix bool) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	if prefix {
		for n := range names {
			if strings.HasPrefix(n, name) {
				return true
			}
		}
	}
	return false
}

// expandBraces expands the first {a,b} of s, recursively: "x_{a,b}_y" is x_a_y and x_b_y.
func expandBraces(s string) []string {
	open := strings.IndexByte(s, '{')
	closing := strings.IndexByte(s, '}')
	if open < 0 || closing < open {
		return []string{strings.Trim(s, "{},")}
	}
	var out []string
	for _, alt := range strings.Split(s[open+1:closing], ",") {
		out = append(out, expandBraces(s[:open]+alt+s[closing+1:])...)
	}
	return out
}

// TestDocsMetricsExist: every ringlog_* metric README.md and docs/ name is one the broker
// exports, so a renamed or dropped metric cannot linger in the docs (the reverse of
// TestOperationsDocListsEveryMetric).
func TestDocsMetricsExist(t *testing.T) {
	names := exportedNames(t)
	names[httpRequestsMetric] = true
	for _, p := range metricMentionProblems(t, filepath.Join("..", ".."), names) {
		t.Error(p)
	}
}

// The check on a seeded fixture: a metric nothing exports, a brace alternative nothing
// exports, and a grep prefix nothing starts with are reported; real names, histogram
// series, brace alternatives and grep prefixes are not.
func TestDocsMetricsExistFixture(t *testing.T) {
	names := map[string]bool{"ringlog_a_total": true, "ringlog_b_total": true, "ringlog_lat_seconds": true}
	got := metricMentionProblems(t, "testdata/docmetrics", names)
	want := []string{
		"README.md:3: ringlog_gone_total is not a metric the broker exports",
		"README.md:4: ringlog_c_total is not a metric the broker exports",
		"README.md:6: ringlog_x is not a metric the broker exports",
		"docs/ops.md:1: ringlog_lat is not a metric the broker exports",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
