package scram

import "testing"

// FuzzParse: none of the four message parsers panics or accepts a message over
// MessageBytesMax, whatever the bytes; seeds under testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", ",", "=", "n,,", "n,,n=user,r=rOprNGfwEbeRWgbNEkqO", "n,,n=a=2Cb,r=x,e=ext",
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
		"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", "e=invalid-proof", "r=a,s=AAAA,i=99999999999999999999",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		cf, err1 := ParseClientFirst(msg)
		_, err2 := ParseServerFirst(msg)
		_, err3 := ParseClientFinal(msg)
		_, err4 := ParseServerFinal(msg)
		if len(msg) > MessageBytesMax+len(gs2Header) && (err1 == nil || err2 == nil || err3 == nil || err4 == nil) {
			t.Fatalf("a %d-byte message was accepted", len(msg))
		}
		if err1 == nil && (cf.User == "" || cf.Nonce == "") {
			t.Fatalf("client-first accepted with empty user or nonce: %q", msg)
		}
		// A server conversation on arbitrary input fails cleanly.
		s := SHA256.NewServer(func(*Mechanism, string) (Credential, bool) { return Credential{}, false },
			func(string) Credential { return Credential{Salt: []byte{1}, Iterations: IterationsMin} })
		if _, err := s.First(msg); err == nil {
			if _, err := s.Final(msg); err == nil {
				t.Fatalf("an unknown user authenticated with %q", msg)
			}
		}
	})
}
