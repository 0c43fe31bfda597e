package controller

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// TransportTLS secures the raft transport between voters: every connection is TLS, the
// listener requires a client certificate (Server's ClientCAs decide which), and a voter
// verifies the one it dials. Both sides are functions of the broker's TLS files, so a
// certificate reloaded on SIGHUP serves the next connection.
type TransportTLS struct {
	// Server is the listener's configuration (it should require and verify a client
	// certificate: raft has no other authentication).
	Server *tls.Config
	// Client gives the configuration of a dial to addr (host:port), called per dial.
	Client func(addr string) (*tls.Config, error)
}

// tlsStreamLayer is raft's StreamLayer over TLS: a TLS listener, and TLS dials.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	client    func(addr string) (*tls.Config, error)
}

func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	cfg, err := l.client(string(address))
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: timeout}
	c, err := tls.DialWithDialer(d, "tcp", string(address), cfg)
	if err != nil {
		return nil, fmt.Errorf("raft TLS dial %s: %w", address, err)
	}
	return c, nil
}

// newTransport is raft's TCP transport on bind, plain or (with t) over TLS.
func newTransport(bind string, advertise net.Addr, t *TransportTLS, logOutput io.Writer) (*raft.NetworkTransport, error) {
	if t == nil {
		return raft.NewTCPTransport(bind, advertise, transportPoolConns, transportTimeout, logOutput)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	layer := &tlsStreamLayer{Listener: tls.NewListener(ln, t.Server), advertise: advertise, client: t.Client}
	return raft.NewNetworkTransport(layer, transportPoolConns, transportTimeout, logOutput), nil
}
