package scram

import (
	"errors"
	"strings"
	"testing"
)

// TestRFC7677Vector: the SCRAM-SHA-256 example of RFC 7677 section 3, byte for byte, both
// sides.
func TestRFC7677Vector(t *testing.T) {
	const (
		clientFirst = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
		serverFirst = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
		clientFinal = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
		serverFinal = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
	)
	c := SHA256.NewClient("user", "pencil", nil)
	c.nonce = "rOprNGfwEbeRWgbNEkqO"
	if got := c.First(); got != clientFirst {
		t.Fatalf("client-first %q", got)
	}
	got, err := c.Final(serverFirst)
	if err != nil || got != clientFinal {
		t.Fatalf("client-final %q %v", got, err)
	}
	if err := c.Verify(serverFinal); err != nil {
		t.Fatal(err)
	}

	sf, _ := ParseServerFirst(serverFirst)
	cred := SHA256.CredentialFromSalted(SHA256.SaltPassword("pencil", sf.Salt, sf.Iterations), sf.Salt, sf.Iterations)
	s := SHA256.NewServer(func(m *Mechanism, user string) (Credential, bool) { return cred, user == "user" }, nil)
	first, err := s.First(clientFirst)
	if err != nil || !strings.HasPrefix(first, "r=rOprNGfwEbeRWgbNEkqO") {
		t.Fatalf("server-first %q %v", first, err)
	}
	// Replay the RFC's server nonce so that the client-final above verifies.
	s.nonce = sf.Nonce
	s.first = serverFirst
	final, err := s.Final(clientFinal)
	if err != nil || final != serverFinal {
		t.Fatalf("server-final %q %v", final, err)
	}
}

func converse(t *testing.T, m *Mechanism, cred Credential, user, password string) error {
	t.Helper()
	fake := func(string) Credential { return Credential{Salt: []byte("fake salt"), Iterations: IterationsMin} }
	s := m.NewServer(func(_ *Mechanism, u string) (Credential, bool) { return cred, u == "alice" }, fake)
	c := m.NewClient(user, password, nil)
	first, err := s.First(c.First())
	if err != nil {
		return err
	}
	final, err := c.Final(first)
	if err != nil {
		return err
	}
	last, err := s.Final(final)
	if err != nil {
		return err
	}
	return c.Verify(last)
}

func TestConversation(t *testing.T) {
	for _, m := range Mechanisms {
		t.Run(m.Name, func(t *testing.T) {
			salt := NewSalt()
			cred := m.CredentialFromSalted(m.SaltPassword("s3cret", salt, IterationsMin), salt, IterationsMin)
			if !m.Valid(cred) {
				t.Fatal("a fresh credential is not valid")
			}
			if err := converse(t, m, cred, "alice", "s3cret"); err != nil {
				t.Fatalf("right password: %v", err)
			}
			if err := converse(t, m, cred, "alice", "wrong"); !errors.Is(err, ErrAuthentication) {
				t.Fatalf("wrong password: %v", err)
			}
			if err := converse(t, m, cred, "bob", "s3cret"); !errors.Is(err, ErrAuthentication) {
				t.Fatalf("unknown user: %v", err)
			}
		})
	}
}

// TestServerRefusesOutOfOrder: a client-final before the client-first, or twice, fails.
func TestServerRefusesOutOfOrder(t *testing.T) {
	s := SHA256.NewServer(func(*Mechanism, string) (Credential, bool) { return Credential{}, false }, nil)
	if _, err := s.Final("c=biws,r=x,p=AAAA"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("final first: %v", err)
	}
}

func TestNameEscaping(t *testing.T) {
	for _, name := range []string{"plain", "a,b", "a=b", "=2C", ",=,="} {
		got, err := unescapeName(escapeName(name))
		if err != nil || got != name {
			t.Errorf("%q -> %q %v", name, got, err)
		}
	}
	if _, err := unescapeName("a=2"); err == nil {
		t.Error("truncated escape accepted")
	}
}

func TestParseRefuses(t *testing.T) {
	for _, msg := range []string{"", "y,,n=a,r=b", "n,a=z,n=a,r=b", "n,,r=b,n=a", "n,,n=,r=b", "n,,n=a,r=", strings.Repeat("n", MessageBytesMax+1)} {
		if _, err := ParseClientFirst(msg); err == nil {
			t.Errorf("client-first %q accepted", msg)
		}
	}
	for _, msg := range []string{"r=a,s=,i=4096", "r=a,s=AAAA,i=1", "r=a,s=AAAA,i=100000", "r=a,s=AAAA", "r=a,s=!!,i=4096"} {
		if _, err := ParseServerFirst(msg); err == nil {
			t.Errorf("server-first %q accepted", msg)
		}
	}
	for _, msg := range []string{"c=biws,r=a", "c=eSws,r=a,p=AAAA", "c=biws,r=a,p=!!"} {
		if _, err := ParseClientFinal(msg); err == nil {
			t.Errorf("client-final %q accepted", msg)
		}
	}
}

func BenchmarkServerConversation(b *testing.B) {
	salt := NewSalt()
	cred := SHA512.CredentialFromSalted(SHA512.SaltPassword("pw", salt, IterationsMin), salt, IterationsMin)
	lookup := func(*Mechanism, string) (Credential, bool) { return cred, true }
	c := SHA512.NewClient("alice", "pw", nil)
	first := c.First()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s := SHA512.NewServer(lookup, nil)
		sf, err := s.First(first)
		if err != nil {
			b.Fatal(err)
		}
		final, err := c.Final(sf) // cached SaltedPassword after the first round
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Final(final); err != nil {
			b.Fatal(err)
		}
	}
}
