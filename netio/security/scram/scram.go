// Package scram implements the SCRAM-SHA-256 and SCRAM-SHA-512 SASL mechanisms (RFC 5802,
// RFC 7677) without channel binding: the client and server conversations, the parsing of
// their four messages, and the derivation of stored credentials from a password.
//
// The conversation, for one user:
//
//	client-first  n,,n=USER,r=CNONCE
//	server-first  r=CNONCE SNONCE,s=BASE64(SALT),i=ITERATIONS
//	client-final  c=biws,r=CNONCE SNONCE,p=BASE64(ClientKey XOR HMAC(StoredKey, AuthMessage))
//	server-final  v=BASE64(HMAC(ServerKey, AuthMessage))   or   e=ERROR
//
// with SaltedPassword = PBKDF2-HMAC-H(password, SALT, ITERATIONS), ClientKey =
// HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey), ServerKey =
// HMAC(SaltedPassword, "Server Key") and AuthMessage = client-first-bare "," server-first
// "," client-final-without-proof. The server keeps only (SALT, ITERATIONS, StoredKey,
// ServerKey): it can check a proof but cannot compute one, nor recover the password.
//
// Passwords are used as their UTF-8 bytes (no SASLprep). The package links nothing of
// ringlog's, so the bundled client and every listener can use it; nothing here logs, and no
// error carries a password, a key or a proof.
package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// Mechanism is one SCRAM hash.
type Mechanism struct {
	Name string
	hash func() hash.Hash
	size int
}

// The mechanisms, by their SASL names.
var (
	SHA256 = &Mechanism{Name: "SCRAM-SHA-256", hash: sha256.New, size: sha256.Size}
	SHA512 = &Mechanism{Name: "SCRAM-SHA-512", hash: sha512.New, size: sha512.Size}
)

// Mechanisms lists the supported mechanisms, strongest first.
var Mechanisms = []*Mechanism{SHA512, SHA256}

// Names lists the names of Mechanisms, in their order: what a server offers.
func Names() []string {
	names := make([]string, 0, len(Mechanisms))
	for _, m := range Mechanisms {
		names = append(names, m.Name)
	}
	return names
}

// ByName returns the mechanism called name, or nil.
func ByName(name string) *Mechanism {
	for _, m := range Mechanisms {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Limits. They are part of the mechanism as ringlog speaks it.
const (
	// IterationsMin is RFC 7677's floor; IterationsMax bounds what a server asks a client
	// to compute (16,384 PBKDF2 rounds of SHA-512: about 10 ms on one core).
	IterationsMin     = 4096
	IterationsMax     = 16384
	IterationsDefault = 8192
	// SaltBytes is the salt length given to new credentials.
	SaltBytes = 16
	// MessageBytesMax bounds every SCRAM message either side accepts; real ones are under
	// 256 bytes.
	MessageBytesMax = 1024
	nonceBytes      = 24
)

// Errors. ErrAuthentication is what a failed proof (or an unknown user) looks like to the
// client: the two are not told apart.
var (
	ErrAuthentication = errors.New("scram: authentication failed")
	ErrMalformed      = errors.New("scram: malformed message")
	ErrServerProof    = errors.New("scram: the server's signature does not verify (not the broker holding this user's credentials)")
)

// Credential is what a server stores for one user and mechanism.
type Credential struct {
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// Size is the hash's output size: the length of a salted password and of both keys.
func (m *Mechanism) Size() int { return m.size }

// SaltPassword computes SaltedPassword (the expensive step: PBKDF2 with iterations rounds).
func (m *Mechanism) SaltPassword(password string, salt []byte, iterations int) []byte {
	out, err := pbkdf2.Key(m.hash, password, salt, iterations, m.size)
	if err != nil { // only for lengths or FIPS modes this package never asks for
		panic(fmt.Sprintf("scram: pbkdf2: %v", err))
	}
	return out
}

// CredentialFromSalted derives the stored keys from a salted password.
func (m *Mechanism) CredentialFromSalted(salted, salt []byte, iterations int) Credential {
	clientKey := m.mac(salted, []byte("Client Key"))
	h := m.hash()
	h.Write(clientKey)
	return Credential{Salt: salt, Iterations: iterations, StoredKey: h.Sum(nil), ServerKey: m.mac(salted, []byte("Server Key"))}
}

// NewSalt returns SaltBytes random bytes.
func NewSalt() []byte {
	b := make([]byte, SaltBytes)
	rand.Read(b)
	return b
}

// CheckIterations says whether n is within [IterationsMin, IterationsMax].
func CheckIterations(n int) error {
	if n < IterationsMin || n > IterationsMax {
		return fmt.Errorf("scram: %d iterations: want %d..%d", n, IterationsMin, IterationsMax)
	}
	return nil
}

// Valid reports whether c has keys of m's size and iterations in range.
func (m *Mechanism) Valid(c Credential) bool {
	return len(c.StoredKey) == m.size && len(c.ServerKey) == m.size && len(c.Salt) > 0 && CheckIterations(c.Iterations) == nil
}

func (m *Mechanism) mac(key, msg []byte) []byte {
	h := hmac.New(m.hash, key)
	h.Write(msg)
	return h.Sum(nil)
}

func newNonce() string {
	b := make([]byte, nonceBytes)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// gs2Header is the GS2 header without channel binding or authorization identity;
// "biws" is its base64 encoding as the client-final's c= attribute carries it.
const (
	gs2Header       = "n,,"
	gs2HeaderBase64 = "biws"
)

// escapeName and unescapeName are RFC 5802's saslname encoding (',' as =2C, '=' as =3D).
func escapeName(s string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(s)
}

func unescapeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", fmt.Errorf("%w: bad escape in user name", ErrMalformed)
		}
		i += 2
	}
	return b.String(), nil
}

// attributes splits a SCRAM message into its k=v attributes, in order, checking each key
// is one letter.
func attributes(msg string) ([][2]string, error) {
	if len(msg) > MessageBytesMax {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrMalformed, len(msg), MessageBytesMax)
	}
	var out [][2]string
	for _, part := range strings.Split(msg, ",") {
		if len(part) < 2 || part[1] != '=' || part[0] < 'a' || part[0] > 'z' {
			return nil, fmt.Errorf("%w: attribute %q", ErrMalformed, truncate(part))
		}
		out = append(out, [2]string{part[:1], part[2:]})
	}
	return out, nil
}

// truncate shortens untrusted text for an error message.
func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// want checks that attrs starts with the given keys and returns their values.
func want(attrs [][2]string, keys ...string) ([]string, error) {
	if len(attrs) < len(keys) {
		return nil, fmt.Errorf("%w: want attributes %s", ErrMalformed, strings.Join(keys, ","))
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		if attrs[i][0] != k {
			return nil, fmt.Errorf("%w: attribute %d is %q, want %q", ErrMalformed, i, attrs[i][0], k)
		}
		out[i] = attrs[i][1]
	}
	return out, nil
}

// ClientFirst is a parsed client-first message.
type ClientFirst struct {
	User  string
	Nonce string
	Bare  string // the message without the GS2 header, part of AuthMessage
}

// ParseClientFirst parses a client-first message. Channel binding and an authorization
// identity are refused; extensions after the nonce are ignored.
func ParseClientFirst(msg string) (ClientFirst, error) {
	bare, ok := strings.CutPrefix(msg, gs2Header)
	if !ok {
		return ClientFirst{}, fmt.Errorf("%w: want GS2 header %q (no channel binding, no authzid)", ErrMalformed, gs2Header)
	}
	attrs, err := attributes(bare)
	if err != nil {
		return ClientFirst{}, err
	}
	v, err := want(attrs, "n", "r")
	if err != nil {
		return ClientFirst{}, err
	}
	user, err := unescapeName(v[0])
	if err != nil {
		return ClientFirst{}, err
	}
	if user == "" || v[1] == "" || !printable(v[1]) {
		return ClientFirst{}, fmt.Errorf("%w: empty user or bad nonce", ErrMalformed)
	}
	return ClientFirst{User: user, Nonce: v[1], Bare: bare}, nil
}

// printable reports whether s is RFC 5802's printable (0x21..0x7e but ',').
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}

// ServerFirst is a parsed server-first message.
type ServerFirst struct {
	Nonce      string
	Salt       []byte
	Iterations int
	Raw        string
}

// ParseServerFirst parses a server-first message; the iteration count must be within
// [IterationsMin, IterationsMax].
func ParseServerFirst(msg string) (ServerFirst, error) {
	attrs, err := attributes(msg)
	if err != nil {
		return ServerFirst{}, err
	}
	v, err := want(attrs, "r", "s", "i")
	if err != nil {
		return ServerFirst{}, err
	}
	salt, err := base64.StdEncoding.DecodeString(v[1])
	if err != nil || len(salt) == 0 {
		return ServerFirst{}, fmt.Errorf("%w: bad salt", ErrMalformed)
	}
	iterations, err := strconv.Atoi(v[2])
	if err != nil {
		return ServerFirst{}, fmt.Errorf("%w: bad iteration count", ErrMalformed)
	}
	if err := CheckIterations(iterations); err != nil {
		return ServerFirst{}, err
	}
	if !printable(v[0]) {
		return ServerFirst{}, fmt.Errorf("%w: bad nonce", ErrMalformed)
	}
	return ServerFirst{Nonce: v[0], Salt: salt, Iterations: iterations, Raw: msg}, nil
}

// ClientFinal is a parsed client-final message.
type ClientFinal struct {
	Nonce        string
	Proof        []byte
	WithoutProof string // the message up to ",p=", part of AuthMessage
}

// ParseClientFinal parses a client-final message.
func ParseClientFinal(msg string) (ClientFinal, error) {
	attrs, err := attributes(msg)
	if err != nil {
		return ClientFinal{}, err
	}
	v, err := want(attrs, "c", "r")
	if err != nil {
		return ClientFinal{}, err
	}
	if v[0] != gs2HeaderBase64 {
		return ClientFinal{}, fmt.Errorf("%w: channel binding %q, want %q", ErrMalformed, truncate(v[0]), gs2HeaderBase64)
	}
	last := attrs[len(attrs)-1]
	if len(attrs) < 3 || last[0] != "p" {
		return ClientFinal{}, fmt.Errorf("%w: no proof", ErrMalformed)
	}
	proof, err := base64.StdEncoding.DecodeString(last[1])
	if err != nil {
		return ClientFinal{}, fmt.Errorf("%w: bad proof encoding", ErrMalformed)
	}
	return ClientFinal{Nonce: v[1], Proof: proof, WithoutProof: msg[:len(msg)-len(last[1])-len(",p=")]}, nil
}

// ParseServerFinal parses a server-final message: the server signature, or the server's
// error as an error wrapping ErrAuthentication.
func ParseServerFinal(msg string) ([]byte, error) {
	attrs, err := attributes(msg)
	if err != nil {
		return nil, err
	}
	switch attrs[0][0] {
	case "e":
		return nil, fmt.Errorf("%w: server says %q", ErrAuthentication, truncate(attrs[0][1]))
	case "v":
		sig, err := base64.StdEncoding.DecodeString(attrs[0][1])
		if err != nil {
			return nil, fmt.Errorf("%w: bad signature encoding", ErrMalformed)
		}
		return sig, nil
	}
	return nil, fmt.Errorf("%w: want v= or e=", ErrMalformed)
}
