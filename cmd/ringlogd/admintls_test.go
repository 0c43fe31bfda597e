package main

import (
	"log/slog"
	"testing"

	"github.com/ringlog/ringlog/netio/security/securitytest"
)

// TestAdminTLSFlag: the admin listener takes the client listener's TLS with --admin-tls on
// (the default), keeps plain HTTP with off or without TLS, and --admin-tls takes on or off.
func TestAdminTLSFlag(t *testing.T) {
	_, st := securitytest.ServerTLS(t, false)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		value   string
		withTLS bool
		https   bool
	}{{"on", true, true}, {"off", true, false}, {"on", false, false}} {
		a := adminFlags{listen: "127.0.0.1:0", bodyBytesMax: 1, connsMax: 1, connsPerAddressMax: 1, tls: tc.value}
		if err := a.check(); err != nil {
			t.Fatal(err)
		}
		serverTLS := st
		if !tc.withTLS {
			serverTLS = nil
		}
		if got := a.config(serverTLS, log).TLS != nil; got != tc.https {
			t.Errorf("--admin-tls %s, TLS files %v: HTTPS %v, want %v", tc.value, tc.withTLS, got, tc.https)
		}
	}
	bad := adminFlags{bodyBytesMax: 1, connsMax: 1, connsPerAddressMax: 1, tls: "yes"}
	if err := bad.check(); err == nil {
		t.Error("--admin-tls yes accepted")
	}
}
