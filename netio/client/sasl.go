package client

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/netio/wire"
)

// SASLConfig authenticates every connection of a Client with SASL/SCRAM before its first
// request (docs/security.md). The password stays in the client: only a proof derived from
// it travels.
type SASLConfig struct {
	Mechanism string // scram.SHA512.Name (default) or scram.SHA256.Name
	User      string
	Password  string
}

// ErrAuthentication wraps every failure to authenticate: wrong credentials, an unknown
// user, a mechanism the broker does not offer, or a broker that failed to prove it holds
// the user's credential.
var ErrAuthentication = errors.New("ringlog client: authentication failed")

// saslState is what a Client's connections share for SCRAM: PBKDF2 is computed once per
// salt, not once per connection.
type saslState struct {
	mu    sync.Mutex
	cache scram.SaltCache // guarded by mu
}

// authenticate runs the SCRAM exchange on a fresh connection and returns the principal
// the broker gave it.
func (c *Client) authenticate(cn *conn) (string, error) {
	cfg := c.cfg.SASL
	name := cfg.Mechanism
	if name == "" {
		name = scram.SHA512.Name
	}
	m := scram.ByName(name)
	if m == nil {
		return "", fmt.Errorf("%w: mechanism %q unknown to this client", ErrAuthentication, name)
	}
	deadline := time.Now().Add(c.cfg.DialTimeout)
	var hs wire.SaslHandshakeResponse
	if err := callConn(cn, &wire.SaslHandshakeRequest{Mechanism: m.Name}, &hs, deadline); err != nil {
		return "", fmt.Errorf("%w: SaslHandshake: %w", ErrAuthentication, err)
	}
	if hs.ErrorCode != wire.ErrNone {
		return "", fmt.Errorf("%w: %w (broker offers %v)", ErrAuthentication, wire.CodeError(hs.ErrorCode, hs.ErrorMessage), hs.Mechanisms)
	}
	c.sasl.mu.Lock()
	defer c.sasl.mu.Unlock()
	var last wire.SaslAuthenticateResponse
	err := m.NewClient(cfg.User, cfg.Password, &c.sasl.cache).Login(func(msg string) (string, error) {
		last = wire.SaslAuthenticateResponse{}
		err := saslStep(cn, []byte(msg), &last, deadline)
		return string(last.AuthBytes), err
	})
	if err != nil && !errors.Is(err, ErrAuthentication) {
		err = fmt.Errorf("%w: %w", ErrAuthentication, err)
	}
	return last.Principal, err
}

func saslStep(cn *conn, msg []byte, resp *wire.SaslAuthenticateResponse, deadline time.Time) error {
	if err := callConn(cn, &wire.SaslAuthenticateRequest{AuthBytes: msg}, resp, deadline); err != nil {
		return fmt.Errorf("%w: SaslAuthenticate: %w", ErrAuthentication, err)
	}
	if resp.ErrorCode != wire.ErrNone {
		return fmt.Errorf("%w: %w", ErrAuthentication, wire.CodeError(resp.ErrorCode, resp.ErrorMessage))
	}
	return nil
}

// callConn sends req on cn and waits for its response until deadline.
func callConn(cn *conn, req, resp wire.Message, deadline time.Time) error {
	result := make(chan error, 1)
	cn.send(req, resp, func(_ wire.Message, err error) { result <- err })
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-result:
		return err
	case <-timer.C:
		cn.fail(fmt.Errorf("%s not answered in time", req.API()))
		return <-result
	}
}
