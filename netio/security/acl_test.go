package security_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/netio/security"
)

func rule(perm security.Permission, principal string, rt security.ResourceType, name string, pattern security.PatternType, op security.Operation) security.ACL {
	return security.ACL{Resource: rt, Name: name, Pattern: pattern, Principal: principal, Operation: op, Permission: perm}
}

// TestAuthorize: deny before allow, default deny, literal/prefix/wildcard patterns, the
// implied Describe, super-users, and ACLs off.
func TestAuthorize(t *testing.T) {
	dir := t.TempDir()
	a, err := security.OpenAuthorizer(dir, true, []string{"User:root"})
	if err != nil {
		t.Fatal(err)
	}
	const (
		T = security.ResourceTopic
		G = security.ResourceGroup
		C = security.ResourceCluster
		L = security.PatternLiteral
		P = security.PatternPrefixed
	)
	rules := []security.ACL{
		rule(security.Allow, "User:alice", T, "orders-", P, security.OpWrite),
		rule(security.Deny, "User:alice", T, "orders-secret", L, security.OpAll),
		rule(security.Allow, "User:*", T, "public", L, security.OpRead),
		rule(security.Allow, "User:bob", T, "*", L, security.OpDescribe),
		rule(security.Allow, "User:bob", G, "billing", L, security.OpRead),
		rule(security.Allow, "User:carol", C, "", L, security.OpCreate),
		rule(security.Deny, "User:*", T, "public", L, security.OpWrite),
		rule(security.Allow, "User:dave", T, "public", L, security.OpWrite),
	}
	if err := a.Add(rules); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		principal string
		op        security.Operation
		rt        security.ResourceType
		name      string
		want      bool
	}{
		{"User:alice", security.OpWrite, T, "orders-eu", true},
		{"User:alice", security.OpDescribe, T, "orders-eu", true}, // implied by write
		{"User:alice", security.OpRead, T, "orders-eu", false},    // default deny
		{"User:alice", security.OpWrite, T, "orders-secret", false},
		{"User:alice", security.OpDescribe, T, "orders-secret", false},
		{"User:alice", security.OpWrite, T, "orders", false}, // prefix "orders-" does not match "orders"
		{"User:alice", security.OpRead, T, "public", true},   // User:*
		{"User:bob", security.OpDescribe, T, "anything", true},
		{"User:bob", security.OpRead, T, "anything", false},
		{"User:bob", security.OpRead, G, "billing", true},
		{"User:bob", security.OpRead, G, "billing-2", false},
		{"User:carol", security.OpCreate, C, security.ClusterName, true},
		{"User:carol", security.OpAlter, C, security.ClusterName, false},
		{"User:dave", security.OpWrite, T, "public", false}, // deny for everyone beats dave's allow
		{"User:root", security.OpDelete, T, "orders-secret", true},
		{security.Anonymous, security.OpDescribe, T, "orders-eu", false},
	} {
		if got := a.Authorize(c.principal, c.op, c.rt, c.name); got != c.want {
			t.Errorf("%s %s %s:%s = %v, want %v", c.principal, c.op, c.rt, c.name, got, c.want)
		}
	}
	if !a.AllowsAny("User:alice", security.OpWrite, T) || a.AllowsAny("User:bob", security.OpWrite, T) {
		t.Error("AllowsAny")
	}

	// The file holds the rules, 0600, and a reopened authorizer decides the same.
	st, err := os.Stat(filepath.Join(dir, security.ACLFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("acl file: %v %v", st, err)
	}
	b, err := security.OpenAuthorizer(dir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.List(security.ACL{}); len(got) != len(rules) {
		t.Fatalf("reopened: %d rules, want %d", len(got), len(rules))
	}
	removed, err := b.Remove([]security.ACL{{Principal: "User:alice"}})
	if err != nil || len(removed) != 2 {
		t.Fatalf("remove alice's rules: %v %v", removed, err)
	}
	if b.Authorize("User:alice", security.OpWrite, T, "orders-eu") {
		t.Fatal("a removed rule still allows")
	}
	off, err := security.OpenAuthorizer(dir, false, nil)
	if err != nil || !off.Authorize("User:nobody", security.OpDelete, T, "x") {
		t.Fatal("ACLs off must allow everything")
	}
	if err := a.Add([]security.ACL{rule(security.Allow, "alice", T, "x", L, security.OpRead)}); err == nil {
		t.Fatal("a principal without User: was accepted")
	}
	// acls.json keeps text: a rule naming a resource that is not UTF-8 would reload as a
	// rule for another name (U+FFFD for each invalid byte), so it is refused.
	if err := a.Add([]security.ACL{rule(security.Deny, "User:*", G, "grp-\xff", L, security.OpRead)}); err == nil {
		t.Fatal("a rule naming a resource that is not UTF-8 was accepted")
	}
}

func BenchmarkAuthorize(b *testing.B) {
	a, err := security.OpenAuthorizer(b.TempDir(), true, nil)
	if err != nil {
		b.Fatal(err)
	}
	var rules []security.ACL
	for i := range 1000 { // 1000 rules of other principals, 10 of this one
		rules = append(rules, rule(security.Allow, "User:u"+string(rune('a'+i%26))+string(rune('a'+i/26%26)), security.ResourceTopic, "t", security.PatternLiteral, security.OpRead))
	}
	for i := range 10 {
		rules = append(rules, rule(security.Allow, "User:me", security.ResourceTopic, "orders-"+string(rune('a'+i)), security.PatternPrefixed, security.OpWrite))
	}
	if err := a.Add(rules); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !a.Authorize("User:me", security.OpWrite, security.ResourceTopic, "orders-j-eu") {
			b.Fatal("denied")
		}
	}
}
