package controller

import (
	"crypto/tls"
	"errors"
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

// streamLayer is raft's StreamLayer: a listener whose connections go through the guard
// (raftguard.go), plain or TLS, and dials of the same kind.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dial      func(address string, timeout time.Duration) (net.Conn, error)
}

func (l *streamLayer) Addr() net.Addr { return l.advertise }

func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return l.dial(string(address), timeout)
}

// newTransport is raft's network transport on bind, plain TCP or (with t) mutual TLS,
// every accepted connection guarded (raftguard.go).
func newTransport(bind string, advertise net.Addr, t *TransportTLS, logOutput io.Writer) (*raft.NetworkTransport, error) {
	if a, ok := advertise.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		return nil, errors.New("raft advertise address is not a usable TCP address") // as raft.NewTCPTransport
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	layer := &streamLayer{Listener: &guardedListener{Listener: ln}, advertise: advertise, dial: func(address string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout("tcp", address, timeout)
	}}
	if t != nil {
		layer.Listener = &guardedListener{Listener: tls.NewListener(ln, t.Server)}
		layer.dial = func(address string, timeout time.Duration) (net.Conn, error) {
			cfg, err := t.Client(address)
			if err != nil {
				return nil, err
			}
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", address, cfg)
			if err != nil {
				return nil, fmt.Errorf("raft TLS dial %s: %w", address, err)
			}
			return c, nil
		}
	}
	return raft.NewNetworkTransport(layer, transportPoolConns, transportTimeout, logOutput), nil
}
