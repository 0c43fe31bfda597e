// Package securitytest makes throw-away certificate authorities and certificates for
// tests of TLS listeners and clients: real PEM files in a directory, as an operator would
// have them; and SCRAM users in a credentials store (AddUser). It is a test helper; nothing
// in the broker imports it.
package securitytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
)

// AddUser stores user's credentials for every SCRAM mechanism (salted at the minimum
// iteration count, to keep tests fast), as `ringlog user add` does.
func AddUser(tb testing.TB, creds *security.Credentials, user, password string) {
	tb.Helper()
	for _, m := range scram.Mechanisms {
		salt := scram.NewSalt()
		if err := creds.Set(user, m, salt, scram.IterationsMin, m.SaltPassword(password, salt, scram.IterationsMin)); err != nil {
			tb.Fatal(err)
		}
	}
}

// CA is a certificate authority whose files live in Dir.
type CA struct {
	Dir    string
	Name   string
	CAFile string // PEM of the CA certificate
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// NewCA makes a CA named name with its certificate at dir/name-ca.pem.
func NewCA(tb testing.TB, dir, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{Dir: dir, Name: name, CAFile: filepath.Join(dir, name+"-ca.pem"), cert: cert, key: key, serial: 1}
	writePEM(tb, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate for commonName, valid for 127.0.0.1 and localhost, as a server
// and a client certificate, and writes dir/file.pem and dir/file-key.pem. It returns the
// two paths.
func (ca *CA) Issue(tb testing.TB, file, commonName string) (certFile, keyFile string) {
	tb.Helper()
	key := newKey(tb)
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"ringlog tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile = filepath.Join(ca.Dir, file+".pem")
	keyFile = filepath.Join(ca.Dir, file+"-key.pem")
	writePEM(tb, certFile, "CERTIFICATE", der)
	writePEM(tb, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// ServerTLS makes a CA in a temporary directory and a "localhost" server certificate of
// it, and loads them as a listener's reloadable TLS configuration; with mutual, clients
// must present a certificate of the same CA (ca.ClientTLS makes a client with one).
func ServerTLS(tb testing.TB, mutual bool) (*CA, *security.ServerTLS) {
	tb.Helper()
	ca := NewCA(tb, tb.TempDir(), "broker")
	cert, key := ca.Issue(tb, "broker", "localhost")
	files := security.TLSFiles{CertFile: cert, KeyFile: key}
	if mutual {
		files.ClientCAFile = ca.CAFile
	}
	st, err := security.NewServerTLS(files)
	if err != nil {
		tb.Fatal(err)
	}
	return ca, st
}

// ClientTLS is a client configuration trusting ca; with a name it also presents a
// certificate of ca with that common name (mutual TLS).
func (ca *CA) ClientTLS(tb testing.TB, name string) *tls.Config {
	tb.Helper()
	opts := security.ClientTLSOptions{CAFile: ca.CAFile}
	if name != "" {
		opts.CertFile, opts.KeyFile = ca.Issue(tb, name, name)
	}
	cfg, err := security.ClientConfig(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func writePEM(tb testing.TB, path, kind string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
