package scram

import (
	"crypto/hmac"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
)

// Client is one client conversation: First, then Final with the server-first message,
// then Verify with the server-final message.
type Client struct {
	m        *Mechanism
	user     string
	password string
	nonce    string
	bare     string
	// salted caches SaltedPassword for a (salt, iterations) pair: every connection of a
	// client to the same broker gets the same salt, and PBKDF2 is the expensive step.
	salted         *SaltCache
	serverSig      []byte
	serverFirstRaw string
}

// SaltCache remembers the last SaltedPassword a client computed. Share one between the
// conversations of one user and password. It is not safe for concurrent use.
type SaltCache struct {
	salt       string
	iterations int
	salted     []byte
}

// NewClient starts a conversation for user with password; cache may be nil.
func (m *Mechanism) NewClient(user, password string, cache *SaltCache) *Client {
	if cache == nil {
		cache = &SaltCache{}
	}
	return &Client{m: m, user: user, password: password, nonce: newNonce(), salted: cache}
}

// First returns the client-first message.
func (c *Client) First() string {
	c.bare = "n=" + escapeName(c.user) + ",r=" + c.nonce
	return gs2Header + c.bare
}

// Final takes the server-first message and returns the client-final message.
func (c *Client) Final(serverFirst string) (string, error) {
	sf, err := ParseServerFirst(serverFirst)
	if err != nil {
		return "", err
	}
	if len(sf.Nonce) <= len(c.nonce) || sf.Nonce[:len(c.nonce)] != c.nonce {
		return "", fmt.Errorf("%w: the server's nonce does not extend ours", ErrMalformed)
	}
	salted := c.salted.get(c.m, c.password, sf.Salt, sf.Iterations)
	withoutProof := "c=" + gs2HeaderBase64 + ",r=" + sf.Nonce
	authMessage := []byte(c.bare + "," + serverFirst + "," + withoutProof)
	clientKey := c.m.mac(salted, []byte("Client Key"))
	h := c.m.hash()
	h.Write(clientKey)
	signature := c.m.mac(h.Sum(nil), authMessage)
	proof := make([]byte, len(clientKey))
	subtle.XORBytes(proof, clientKey, signature)
	c.serverSig = c.m.mac(c.m.mac(salted, []byte("Server Key")), authMessage)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

// Verify checks the server-final message: the server proved it holds the user's
// credential.
func (c *Client) Verify(serverFinal string) error {
	sig, err := ParseServerFinal(serverFinal)
	if err != nil {
		return err
	}
	if c.serverSig == nil || !hmac.Equal(sig, c.serverSig) {
		return ErrServerProof
	}
	return nil
}

// Login runs the client side of a whole exchange: send carries a client message to the
// server and returns the server's answer (the transport's framing and error codes are the
// caller's). It returns the first error, of send or of the conversation.
func (c *Client) Login(send func(clientMsg string) (serverMsg string, err error)) error {
	serverFirst, err := send(c.First())
	if err != nil {
		return err
	}
	final, err := c.Final(serverFirst)
	if err != nil {
		return err
	}
	serverFinal, err := send(final)
	if err != nil {
		return err
	}
	return c.Verify(serverFinal)
}

func (sc *SaltCache) get(m *Mechanism, password string, salt []byte, iterations int) []byte {
	if sc.salted == nil || sc.salt != string(salt) || sc.iterations != iterations {
		sc.salt, sc.iterations, sc.salted = string(salt), iterations, m.SaltPassword(password, salt, iterations)
	}
	return sc.salted
}

// Lookup finds a user's credential for a mechanism; ok false for an unknown user.
type Lookup func(m *Mechanism, user string) (cred Credential, ok bool)

// Server is one server conversation: First with the client-first message, then Final
// with the client-final message. Neither step is expensive: the server only computes
// HMACs.
type Server struct {
	m          *Mechanism
	lookup     Lookup
	fake       func(user string) Credential
	user       string
	cred       Credential
	known      bool
	nonce      string
	clientBare string
	first      string
	done       bool
}

// NewServer starts a server conversation. fake, for an unknown user, returns a credential
// that looks real (a salt stable per user) so that the conversation does not reveal which
// users exist; the final step then fails as for a wrong password.
func (m *Mechanism) NewServer(lookup Lookup, fake func(user string) Credential) *Server {
	return &Server{m: m, lookup: lookup, fake: fake}
}

// First takes the client-first message and returns the server-first message.
func (s *Server) First(clientFirst string) (string, error) {
	if s.first != "" {
		return "", fmt.Errorf("%w: second client-first message", ErrMalformed)
	}
	cf, err := ParseClientFirst(clientFirst)
	if err != nil {
		return "", err
	}
	s.user, s.clientBare = cf.User, cf.Bare
	s.cred, s.known = s.lookup(s.m, cf.User)
	if !s.known {
		s.cred = s.fake(cf.User)
	}
	s.nonce = cf.Nonce + newNonce()
	s.first = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(s.cred.Salt) + ",i=" + strconv.Itoa(s.cred.Iterations)
	return s.first, nil
}

// User is the user name the client claimed in its first message (authenticated only once
// Final succeeded).
func (s *Server) User() string { return s.user }

// Final takes the client-final message and returns the server-final message. A wrong
// proof or an unknown user returns ErrAuthentication (and no message to send).
func (s *Server) Final(clientFinal string) (string, error) {
	if s.first == "" || s.done {
		return "", fmt.Errorf("%w: client-final out of order", ErrMalformed)
	}
	s.done = true
	cf, err := ParseClientFinal(clientFinal)
	if err != nil {
		return "", err
	}
	if cf.Nonce != s.nonce {
		return "", fmt.Errorf("%w: nonce does not match", ErrAuthentication)
	}
	authMessage := []byte(s.clientBare + "," + s.first + "," + cf.WithoutProof)
	signature := s.m.mac(s.cred.StoredKey, authMessage)
	if len(cf.Proof) != len(signature) {
		return "", ErrAuthentication
	}
	clientKey := make([]byte, len(signature))
	subtle.XORBytes(clientKey, cf.Proof, signature)
	h := s.m.hash()
	h.Write(clientKey)
	if subtle.ConstantTimeCompare(h.Sum(nil), s.cred.StoredKey) != 1 || !s.known {
		return "", ErrAuthentication
	}
	return "v=" + base64.StdEncoding.EncodeToString(s.m.mac(s.cred.ServerKey, authMessage)), nil
}
