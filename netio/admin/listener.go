package admin

import (
	"net"
	"sync"
)

// limitListener closes connections past a total or per-client-IP count at accept, as the
// main listener does (netio.Config.ConnectionsMax, ConnectionsPerAddressMax), so one
// client cannot hold every admin connection.
type limitListener struct {
	net.Listener
	total, perAddress int

	mu     sync.Mutex
	open   int            // guarded by mu
	byAddr map[string]int // guarded by mu; entries go when their count reaches 0
}

func newLimitListener(ln net.Listener, total, perAddress int) *limitListener {
	return &limitListener{Listener: ln, total: total, perAddress: perAddress, byAddr: map[string]int{}}
}

// Accept returns the next connection within the limits; refused ones are closed here.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c.RemoteAddr())
		if !l.admit(ip) {
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l, ip: ip}, nil
	}
}

func (l *limitListener) admit(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.total || l.byAddr[ip] >= l.perAddress {
		return false
	}
	l.open++
	l.byAddr[ip]++
	return true
}

func (l *limitListener) leave(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[ip]--; l.byAddr[ip] <= 0 {
		delete(l.byAddr, ip)
	}
}

type limitedConn struct {
	net.Conn
	l    *limitListener
	ip   string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.leave(c.ip) })
	return err
}

func remoteIP(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
