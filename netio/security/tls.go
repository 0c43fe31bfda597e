package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
)

// TLSFiles names the PEM files of a listener's TLS setup.
type TLSFiles struct {
	CertFile string // certificate chain, leaf first
	KeyFile  string // the leaf's private key
	// ClientCAFile, when set, turns on mutual TLS: a client must present a certificate
	// that chains to one of these CAs, and its subject becomes the connection's principal.
	ClientCAFile string
	// PeerCAFile, when set, holds the CAs of the other brokers of a cluster: a broker
	// verifies the peer it dials against them (replica fetches, controller commands, the
	// controller's raft transport), presents its own CertFile as its client certificate,
	// and the raft transport's listener requires a client certificate they signed.
	PeerCAFile string
}

// ServerTLS is a listener's TLS configuration whose certificate (and client CAs) can be
// reloaded while the listener runs: Config returns a tls.Config that asks for the current
// files on every handshake, so connections opened after Reload use the new certificate
// and established ones keep theirs.
type ServerTLS struct {
	files   TLSFiles
	current atomic.Pointer[tls.Config]    // the loaded files; replaced whole by Reload
	peerCAs atomic.Pointer[x509.CertPool] // PeerCAFile's CAs; nil without one
}

// NewServerTLS loads files; the certificate and key must parse and match.
func NewServerTLS(files TLSFiles) (*ServerTLS, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("tls: a certificate file and a key file are both required")
	}
	s := &ServerTLS{files: files}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again. On any error the running configuration stays and the
// error says which file failed (never its contents).
func (s *ServerTLS) Reload() error {
	cfg, err := loadServerConfig(s.files)
	if err != nil {
		return err
	}
	var peers *x509.CertPool
	if s.files.PeerCAFile != "" {
		if peers, err = loadCAPool(s.files.PeerCAFile); err != nil {
			return err
		}
	}
	s.current.Store(cfg)
	s.peerCAs.Store(peers)
	return nil
}

// ErrNoPeerCA: the inter-broker TLS configurations need TLSFiles.PeerCAFile.
var ErrNoPeerCA = errors.New("tls: no CA file for the other brokers (--inter-broker-tls-ca)")

// PeerClientConfig is the tls.Config with which this broker dials another one at addr
// (host:port): it verifies the peer's certificate against PeerCAFile's CAs for addr's host
// and presents this broker's own certificate. It is built from the files most recently
// loaded, so a dial after Reload uses the new certificate and CAs: call it per dial.
func (s *ServerTLS) PeerClientConfig(addr string) (*tls.Config, error) {
	pool := s.peerCAs.Load()
	if pool == nil {
		return nil, ErrNoPeerCA
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	cur := s.current.Load()
	return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host, RootCAs: pool, Certificates: cur.Certificates}, nil
}

// PeerServerConfig is the tls.Config of a listener only other brokers dial (the
// controller's raft transport): this broker's certificate, and a client certificate
// signed by PeerCAFile's CAs required of every peer. Like Config it takes the files most
// recently loaded on every handshake.
func (s *ServerTLS) PeerServerConfig() (*tls.Config, error) {
	if s.peerCAs.Load() == nil {
		return nil, ErrNoPeerCA
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: s.current.Load().Certificates,
				ClientCAs: s.peerCAs.Load(), ClientAuth: tls.RequireAndVerifyClientCert}, nil
		},
	}, nil
}

// MutualTLS reports whether clients must present a certificate.
func (s *ServerTLS) MutualTLS() bool { return s.files.ClientCAFile != "" }

// Leaf returns the certificate currently served (for logs: its subject and expiry).
func (s *ServerTLS) Leaf() *x509.Certificate { return s.current.Load().Certificates[0].Leaf }

// Config returns the tls.Config to give tls.Server (or tls.NewListener): every handshake
// takes the configuration most recently loaded.
func (s *ServerTLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current.Load(), nil
		},
	}
}

func loadServerConfig(files TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load certificate %s with key %s: %w", files.CertFile, files.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if files.ClientCAFile != "" {
		pool, err := loadCAPool(files.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func loadCAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// ClientTLSOptions are a client's TLS settings as the CLI names them.
type ClientTLSOptions struct {
	CAFile             string // verify the broker against these CAs; empty: the system roots
	CertFile, KeyFile  string // client certificate for mutual TLS; both or neither
	InsecureSkipVerify bool   // do not verify the broker's certificate (tests only)
	ServerName         string // name to verify; empty: the host of the address dialled
}

// ClientConfig builds a client tls.Config from opts.
func ClientConfig(opts ClientTLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: opts.ServerName, InsecureSkipVerify: opts.InsecureSkipVerify}
	if opts.CAFile != "" {
		pool, err := loadCAPool(opts.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both --tls-cert and --tls-key")
	}
	if opts.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: load client certificate %s with key %s: %w", opts.CertFile, opts.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
