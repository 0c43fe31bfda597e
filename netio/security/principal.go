package security

import (
	"crypto/tls"
	"strings"
)

// Principals are strings "User:NAME" (Kafka's convention). ANONYMOUS is the principal of
// a connection that has not authenticated (allowed only with authentication off).
const (
	PrincipalPrefix = "User:"
	Anonymous       = PrincipalPrefix + "ANONYMOUS"
)

// UserPrincipal is the principal of a SCRAM user.
func UserPrincipal(user string) string { return PrincipalPrefix + user }

// TLSPrincipal is the principal of a mutual-TLS connection: "User:" and the common name
// of the client certificate's subject, or the whole subject (RFC 2253 form) when it has
// no common name. Empty when the client presented no certificate.
func TLSPrincipal(state tls.ConnectionState) string {
	if len(state.PeerCertificates) == 0 {
		return ""
	}
	subject := state.PeerCertificates[0].Subject
	if subject.CommonName != "" {
		return PrincipalPrefix + subject.CommonName
	}
	return PrincipalPrefix + subject.String()
}

// ValidPrincipal reports whether p is "User:NAME" with a NAME of printable characters.
func ValidPrincipal(p string) bool {
	name, ok := strings.CutPrefix(p, PrincipalPrefix)
	if !ok || name == "" || len(p) > principalBytesMax {
		return false
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// principalBytesMax bounds a principal: user names are short; a certificate subject fits.
const principalBytesMax = 1024
