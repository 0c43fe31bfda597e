package admin

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
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
