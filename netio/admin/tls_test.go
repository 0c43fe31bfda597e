package admin_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/security/securitytest"
)

// TestMetricsOverTLS: with Config.TLS the admin listener serves /metrics over HTTPS to a
// client trusting the test CA, and refuses plain HTTP and a client trusting another CA.
// With a client CA (mutual TLS) a scraper without a certificate is refused too.
func TestMetricsOverTLS(t *testing.T) {
	for _, mutual := range []bool{false, true} {
		ca, st := securitytest.ServerTLS(t, mutual)
		b := brokertest.Start(t, brokertest.Options{Admin: &admin.Config{TLS: st.Config()}, NoClient: true})
		addr := b.Node.Admin.Addr()
		scraper := ""
		if mutual {
			scraper = "scraper"
		}
		status, body, err := get("https://"+addr+"/metrics", ca.ClientTLS(t, scraper))
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
		if _, _, err := get("https://"+addr+"/metrics", other.ClientTLS(t, "")); err == nil {
			t.Fatalf("mutual %v: a client trusting another CA was served", mutual)
		}
		if mutual {
			if _, _, err := get("https://"+addr+"/metrics", ca.ClientTLS(t, "")); err == nil {
				t.Fatal("a scraper without a client certificate passed mutual TLS")
			}
		}
	}
}

// get fetches url with cfg; a TLS failure is err.
func get(url string, cfg *tls.Config) (int, string, error) {
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
