package admin_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
)

// TestMetricsOverTLS: with Config.TLS the admin listener serves /metrics over HTTPS to a
// client trusting the test CA, and refuses plain HTTP and a client trusting another CA.
// With a client CA (mutual TLS) a scraper without a certificate is refused too.
func TestMetricsOverTLS(t *testing.T) {
	ca := securitytest.NewCA(t, t.TempDir(), "broker")
	cert, key := ca.Issue(t, "broker", "localhost")
	for _, mutual := range []bool{false, true} {
		files := security.TLSFiles{CertFile: cert, KeyFile: key}
		if mutual {
			files.ClientCAFile = ca.CAFile
		}
		st, err := security.NewServerTLS(files)
		if err != nil {
			t.Fatal(err)
		}
		b := brokertest.Start(t, brokertest.Options{Admin: &admin.Config{TLS: st.Config()}, NoClient: true})
		addr := b.Node.Admin.Addr()
		trusting := security.ClientTLSOptions{CAFile: ca.CAFile}
		if mutual {
			trusting.CertFile, trusting.KeyFile = ca.Issue(t, "scraper", "scraper")
		}
		status, body, err := get(t, "https://"+addr+"/metrics", trusting)
		if err != nil || status != http.StatusOK || !strings.Contains(body, "ringlog_") {
			t.Fatalf("mutual %v: GET https /metrics: %v, %d, %d bytes", mutual, err, status, len(body))
		}
		// net/http answers a plain request on a TLS connection 400 and closes it.
		plain, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatalf("mutual %v: plain HTTP: %v (want a 400 answer)", mutual, err)
		}
		raw, _ := io.ReadAll(plain.Body)
		body = string(raw)
		plain.Body.Close()
		if plain.StatusCode != http.StatusBadRequest || strings.Contains(body, "ringlog_") {
			t.Fatalf("mutual %v: plain HTTP /metrics answered %d %q, want 400", mutual, plain.StatusCode, body)
		}
		other := securitytest.NewCA(t, t.TempDir(), "other")
		if _, _, err := get(t, "https://"+addr+"/metrics", security.ClientTLSOptions{CAFile: other.CAFile}); err == nil {
			t.Fatalf("mutual %v: a client trusting another CA was served", mutual)
		}
		if mutual {
			if _, _, err := get(t, "https://"+addr+"/metrics", security.ClientTLSOptions{CAFile: ca.CAFile}); err == nil {
				t.Fatal("a scraper without a client certificate passed mutual TLS")
			}
		}
	}
}

// get fetches url with a client built from opts; a TLS failure is err.
func get(t *testing.T, url string, opts security.ClientTLSOptions) (int, string, error) {
	t.Helper()
	cfg, err := security.ClientConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
