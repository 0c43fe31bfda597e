package main

// The security flags (docs/security.md): TLS on the client listener, and the reload of
// its certificate on SIGHUP.

import (
	"errors"
	"flag"
	"log/slog"

	"github.com/ringlog/ringlog/netio/security"
)

type securityFlags struct {
	tlsCert     string
	tlsKey      string
	tlsClientCA string
}

func (f *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate chain of the client listener; with --tls-key turns TLS on (re-read on SIGHUP)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert (re-read on SIGHUP)")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM CA certificates: clients must present a certificate they signed (mutual TLS; the subject's CN is the principal); re-read on SIGHUP")
}

func (f *securityFlags) check() error {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if f.tlsClientCA != "" && f.tlsCert == "" {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
	}
	return nil
}

// serverTLS loads the listener's TLS files; nil when TLS is off.
func (f *securityFlags) serverTLS() (*security.ServerTLS, error) {
	if f.tlsCert == "" {
		return nil, nil
	}
	return security.NewServerTLS(security.TLSFiles{CertFile: f.tlsCert, KeyFile: f.tlsKey, ClientCAFile: f.tlsClientCA})
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
