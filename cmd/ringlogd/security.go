package main

// The security flags (docs/security.md): TLS on the client listener (which the Kafka and
// admin listeners share), and the reload of its certificate on SIGHUP.

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/replication/controller"
)

type securityFlags struct {
	tlsCert     string
	tlsKey      string
	tlsClientCA string
	auth        string
	acl         string
	superUsers  string
	quotas      security.QuotaRates
	groupFetch  int64 // --quota-group-fetch-bytes-per-sec
	overrides   string
	// Broker-to-broker connections of a cluster (--node-id).
	peerCA        string
	peerCredsFile string
	peerMechanism string
}

func (f *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate chain of the client listener, the Kafka listener and (--admin-tls) the admin listener; with --tls-key turns TLS on (re-read on SIGHUP)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert (re-read on SIGHUP)")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM CA certificates: clients must present a certificate they signed (mutual TLS; the subject's CN is the principal); re-read on SIGHUP")
	fs.StringVar(&f.auth, "auth", "off", "required: every connection authenticates (SASL/SCRAM-SHA-256/512 with the users of DATA/credentials.json, or a --tls-client-ca certificate) before any request; off: anyone connects as User:ANONYMOUS")
	fs.StringVar(&f.acl, "acl", "off", "on: every request is checked against the ACLs of DATA/acls.json (ringlog acl), deny before allow, default deny; off: everything is allowed")
	fs.StringVar(&f.superUsers, "super-users", "", "principals allowed everything, ACLs or not, and the only ones who administer users and ACLs when --auth required and --acl off: User:NAME[,User:NAME...]")
	fs.StringVar(&f.peerCA, "inter-broker-tls-ca", "", "PEM CA certificates of the other brokers' --tls-cert: a cluster's broker verifies the brokers it dials (replica fetches, controller commands, the raft transport) against them and presents its own --tls-cert; the raft listener requires a certificate they signed. Needed with --node-id and --tls-cert; re-read on SIGHUP")
	fs.StringVar(&f.peerCredsFile, "inter-broker-credentials-file", "", "file holding the SCRAM user (first line) and password (second line) this broker logs in with on the other brokers of its cluster (needed with --node-id and --auth required unless the brokers' certificates are the login: --tls-client-ca); re-read on SIGHUP")
	fs.StringVar(&f.peerMechanism, "inter-broker-sasl-mechanism", "SCRAM-SHA-512", "SCRAM mechanism of --inter-broker-credentials-file: SCRAM-SHA-512 or SCRAM-SHA-256")
	fs.Int64Var(&f.quotas.ProduceBytesPerSec, "quota-produce-bytes-per-sec", 0, "produce request bytes per second each client (principal, or client id when anonymous) may send before its replies are delayed; 0: unlimited")
	fs.Int64Var(&f.quotas.FetchBytesPerSec, "quota-fetch-bytes-per-sec", 0, "fetched record bytes per second each client may receive before its replies are delayed; 0: unlimited")
	fs.Int64Var(&f.quotas.RequestsPerSec, "quota-requests-per-sec", 0, "requests per second each client may send before its replies are delayed; 0: unlimited")
	fs.Int64Var(&f.groupFetch, "quota-group-fetch-bytes-per-sec", 0, "fetched record bytes per second each consumer group may receive, all the connections that state the group together (the bundled group consumer does), before their replies are delayed; 0: unlimited")
	fs.StringVar(&f.overrides, "quota-overrides", "", "rates replacing the defaults for the clients and groups named: ENTITY=KIND:RATE[,KIND:RATE][;ENTITY=...], ENTITY User:NAME or client-id:ID (KIND produce, fetch or requests; unnamed kinds: unlimited) or group:NAME (KIND fetch)")
}

func (f *securityFlags) check() error {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if f.tlsClientCA != "" && f.tlsCert == "" {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
	}
	if f.peerCA != "" && f.tlsCert == "" {
		return errors.New("--inter-broker-tls-ca needs --tls-cert and --tls-key (a broker presents its own certificate to the others)")
	}
	if scram.ByName(f.peerMechanism) == nil {
		return fmt.Errorf("--inter-broker-sasl-mechanism %q: want one of %v", f.peerMechanism, scram.Names())
	}
	if f.auth != "required" && f.auth != "off" {
		return fmt.Errorf("--auth %q: want required or off", f.auth)
	}
	if f.acl != "on" && f.acl != "off" {
		return fmt.Errorf("--acl %q: want on or off", f.acl)
	}
	for _, p := range f.superUserList() {
		if !security.ValidPrincipal(p) || p == security.AnyPrincipal {
			return fmt.Errorf("--super-users: %q: want User:NAME", p)
		}
	}
	if f.quotas.ProduceBytesPerSec < 0 || f.quotas.FetchBytesPerSec < 0 || f.quotas.RequestsPerSec < 0 || f.groupFetch < 0 {
		return errors.New("--quota-*: want 0 (unlimited) or a positive rate")
	}
	if _, err := security.ParseQuotaOverrides(f.overrides); err != nil {
		return fmt.Errorf("--quota-overrides: %w", err)
	}
	return nil
}

func (f *securityFlags) superUserList() []string { return splitList(f.superUsers) }

// serverSecurity opens the credentials and ACLs of dataDir and sets up the quotas.
func (f *securityFlags) serverSecurity(dataDir string, log *slog.Logger) (*netio.Security, error) {
	creds, err := security.OpenCredentials(dataDir)
	if err != nil {
		return nil, err
	}
	authz, err := security.OpenAuthorizer(dataDir, f.acl == "on", f.superUserList())
	if err != nil {
		return nil, err
	}
	overrides, _ := security.ParseQuotaOverrides(f.overrides) // validated
	quotas := security.NewQuotas(security.QuotaConfig{Default: f.quotas, GroupFetchBytesPerSec: f.groupFetch, Overrides: overrides})
	sec := &netio.Security{Credentials: creds, AuthRequired: f.auth == "required", Authorizer: authz, Quotas: quotas}
	if sec.AuthRequired && f.tlsCert == "" {
		log.Warn("--auth required without TLS: SCRAM never sends the password, but everything after the login travels in clear and can be taken over on the path; use --tls-cert")
	}
	if sec.AuthRequired && creds.Len() == 0 && f.tlsClientCA == "" {
		log.Warn("--auth required with no SCRAM users and no client CA: nobody can log in; add users with `ringlog user add --data DIR` while the broker is stopped")
	}
	return sec, nil
}

// checkCluster checks the broker-to-broker settings of a cluster's broker: its listeners'
// TLS and authentication must be passable by the other brokers' connections.
func (f *securityFlags) checkCluster() error {
	if f.tlsCert != "" && f.peerCA == "" {
		return errors.New("--node-id with --tls-cert: brokers dial each other over TLS; give --inter-broker-tls-ca (the CAs of the brokers' certificates)")
	}
	if f.auth == "required" && f.peerCredsFile == "" && f.tlsClientCA == "" {
		return errors.New("--node-id with --auth required: brokers log in to each other; give --inter-broker-credentials-file, or TLS client certificates (--tls-client-ca)")
	}
	return nil
}

// peerDialer is how this broker dials the others of its cluster, and raftTLS secures the
// controller voters' raft transport (nil: plain, when the listeners are plain).
func (f *securityFlags) peerDialer(st *security.ServerTLS) (*netio.PeerDialer, *controller.TransportTLS, *security.PeerCredentialsFile, error) {
	d := &netio.PeerDialer{}
	var raftTLS *controller.TransportTLS
	if st != nil {
		server, err := st.PeerServerConfig()
		if err != nil {
			return nil, nil, nil, err
		}
		d.TLS = st.PeerClientConfig
		raftTLS = &controller.TransportTLS{Server: server, Client: st.PeerClientConfig}
	}
	var creds *security.PeerCredentialsFile
	if f.peerCredsFile != "" {
		var err error
		if creds, err = security.OpenPeerCredentials(f.peerCredsFile, f.peerMechanism); err != nil {
			return nil, nil, nil, err
		}
		d.Credentials = creds.Current
	}
	return d, raftTLS, creds, nil
}

// reloadPeerCredentials re-reads the inter-broker credentials file on SIGHUP: the next
// broker-to-broker connection logs in with them.
func reloadPeerCredentials(c *security.PeerCredentialsFile, log *slog.Logger) {
	if c == nil {
		return
	}
	if err := c.Reload(); err != nil {
		log.Error("inter-broker credentials reload failed; the running ones stay", "err", err)
		return
	}
	log.Info("inter-broker credentials reloaded", "user", c.Current())
}

// serverTLS loads the listener's TLS files; nil when TLS is off.
func (f *securityFlags) serverTLS() (*security.ServerTLS, error) {
	if f.tlsCert == "" {
		return nil, nil
	}
	return security.NewServerTLS(security.TLSFiles{CertFile: f.tlsCert, KeyFile: f.tlsKey, ClientCAFile: f.tlsClientCA, PeerCAFile: f.peerCA})
}

// reloadTLS re-reads the TLS files on SIGHUP: new connections get the new certificate,
// open ones keep theirs; a file that fails to load leaves the running certificate.
func reloadTLS(st *security.ServerTLS, log *slog.Logger) {
	if st == nil {
		return
	}
	if err := st.Reload(); err != nil {
		log.Error("TLS reload failed; the running certificate stays", "err", err)
		return
	}
	leaf := st.Leaf()
	log.Info("TLS certificate reloaded", "subject", leaf.Subject.String(), "not_after", leaf.NotAfter)
}

// quotaKeys are the reloadable quota settings (reload.go); reloadQuotas applies them.
var quotaKeys = []string{"quota-produce-bytes-per-sec", "quota-fetch-bytes-per-sec", "quota-requests-per-sec", "quota-group-fetch-bytes-per-sec", "quota-overrides"}

// reloadQuotas applies the quota settings of the configuration now running (after a
// SIGHUP) if they differ from before: owed time is kept, new rates apply to the next reply.
func reloadQuotas(q *security.Quotas, before, after *settings, log *slog.Logger) {
	changed := false
	for _, k := range quotaKeys {
		changed = changed || before.value(k) != after.value(k)
	}
	if !changed {
		return
	}
	f := after.o.security
	overrides, _ := security.ParseQuotaOverrides(f.overrides) // validated
	q.SetRates(f.quotas, f.groupFetch, overrides)
	log.Info("quotas reloaded", "produce_bytes_per_sec", f.quotas.ProduceBytesPerSec, "fetch_bytes_per_sec", f.quotas.FetchBytesPerSec,
		"requests_per_sec", f.quotas.RequestsPerSec, "group_fetch_bytes_per_sec", f.groupFetch, "overrides", len(overrides))
}
