package security

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// ACLs. A rule allows or denies one principal (or every principal, "User:*") one operation
// on the resources a pattern names: a literal name ("*" is every resource of the type) or
// a prefix. Deciding (principal, operation, resource):
//
//  1. ACLs off, or the principal is a super-user: allowed.
//  2. A deny rule matches: denied (deny before allow).
//  3. An allow rule matches: allowed. Read, Write, Create, Delete and Alter rules also
//     allow Describe of the same resource; All matches every operation.
//  4. Otherwise denied (default deny).
//
// The rules live in DATA/acls.json (0600, replaced atomically on every change), indexed by
// principal in memory so that a decision scans only the rules of that principal and of
// "User:*".

// ResourceType, PatternType, Operation and Permission have the values of the wire's
// ACL fields (netio/wire ACL* constants).
type (
	ResourceType int8
	PatternType  int8
	Operation    int8
	Permission   int8
)

const (
	ResourceTopic   ResourceType = 1
	ResourceGroup   ResourceType = 2
	ResourceCluster ResourceType = 3

	PatternLiteral  PatternType = 1
	PatternPrefixed PatternType = 2

	OpAll      Operation = 1
	OpRead     Operation = 2
	OpWrite    Operation = 3
	OpCreate   Operation = 4
	OpDelete   Operation = 5
	OpDescribe Operation = 6
	OpAlter    Operation = 7

	Deny  Permission = 1
	Allow Permission = 2
)

// AnyPrincipal in a rule matches every principal.
const AnyPrincipal = PrincipalPrefix + "*"

// ClusterName is the one cluster resource's name.
const ClusterName = "cluster"

var (
	resourceNames   = map[ResourceType]string{ResourceTopic: "topic", ResourceGroup: "group", ResourceCluster: "cluster"}
	patternNames    = map[PatternType]string{PatternLiteral: "literal", PatternPrefixed: "prefixed"}
	operationNames  = map[Operation]string{OpAll: "all", OpRead: "read", OpWrite: "write", OpCreate: "create", OpDelete: "delete", OpDescribe: "describe", OpAlter: "alter"}
	permissionNames = map[Permission]string{Deny: "deny", Allow: "allow"}
)

func (r ResourceType) String() string { return nameOr(resourceNames, r) }
func (p PatternType) String() string  { return nameOr(patternNames, p) }
func (o Operation) String() string    { return nameOr(operationNames, o) }
func (p Permission) String() string   { return nameOr(permissionNames, p) }

func nameOr[K comparable](names map[K]string, k K) string {
	if n, ok := names[k]; ok {
		return n
	}
	return fmt.Sprintf("%v?", any(k))
}

// ParseResourceType, ParseOperation, ParsePatternType and ParsePermission read the names
// above (as the CLI and the file spell them).
func ParseResourceType(s string) (ResourceType, error) {
	return parseName(resourceNames, s, "resource type")
}
func ParseOperation(s string) (Operation, error) { return parseName(operationNames, s, "operation") }
func ParsePatternType(s string) (PatternType, error) {
	return parseName(patternNames, s, "pattern type")
}
func ParsePermission(s string) (Permission, error) {
	return parseName(permissionNames, s, "permission")
}

func parseName[K comparable](names map[K]string, s, what string) (K, error) {
	for k, n := range names {
		if n == strings.ToLower(s) {
			return k, nil
		}
	}
	var valid []string
	for _, n := range names {
		valid = append(valid, n)
	}
	sort.Strings(valid)
	var zero K
	return zero, fmt.Errorf("%s %q: want one of %s", what, s, strings.Join(valid, ", "))
}

// ACL is one rule.
type ACL struct {
	Resource   ResourceType
	Name       string
	Pattern    PatternType
	Principal  string
	Operation  Operation
	Permission Permission
}

func (a ACL) String() string {
	return fmt.Sprintf("%s %s %s:%s %s %s", a.Permission, a.Principal, a.Resource, a.Name, a.Pattern, a.Operation)
}

// Validate checks that every field of a rule is set and in range.
func (a ACL) Validate() error {
	switch {
	case resourceNames[a.Resource] == "":
		return fmt.Errorf("resource type %d unknown", a.Resource)
	case patternNames[a.Pattern] == "":
		return fmt.Errorf("pattern type %d unknown", a.Pattern)
	case operationNames[a.Operation] == "":
		return fmt.Errorf("operation %d unknown", a.Operation)
	case permissionNames[a.Permission] == "":
		return fmt.Errorf("permission %d unknown", a.Permission)
	case !ValidPrincipal(a.Principal):
		return fmt.Errorf("principal %q: want User:NAME or User:*", a.Principal)
	case a.Resource != ResourceCluster && a.Name == "":
		return errors.New("a topic or group rule needs a resource name (or * for all)")
	case a.Resource == ResourceCluster && a.Pattern != PatternLiteral:
		return errors.New("cluster rules are literal")
	case len(a.Name) > 255:
		return errors.New("resource name over 255 bytes")
	case !utf8.ValidString(a.Name) || !utf8.ValidString(a.Principal):
		// acls.json keeps text only: the rule would come back from it naming another
		// resource (each invalid byte saved as U+FFFD), and a deny would stop applying.
		return errors.New("resource name and principal must be UTF-8")
	}
	return nil
}

// Matches reports whether filter selects a: zero fields and empty strings match anything.
func (filter ACL) Matches(a ACL) bool {
	return (filter.Resource == 0 || filter.Resource == a.Resource) &&
		(filter.Name == "" || filter.Name == a.Name) &&
		(filter.Pattern == 0 || filter.Pattern == a.Pattern) &&
		(filter.Principal == "" || filter.Principal == a.Principal) &&
		(filter.Operation == 0 || filter.Operation == a.Operation) &&
		(filter.Permission == 0 || filter.Permission == a.Permission)
}

// covers reports whether rule a applies to (op, rt, name).
func (a ACL) covers(op Operation, rt ResourceType, name string) bool {
	if a.Resource != rt {
		return false
	}
	if rt != ResourceCluster {
		switch a.Pattern {
		case PatternLiteral:
			if a.Name != "*" && a.Name != name {
				return false
			}
		case PatternPrefixed:
			if !strings.HasPrefix(name, a.Name) {
				return false
			}
		}
	}
	if a.Operation == OpAll || a.Operation == op {
		return true
	}
	// Kafka's implication: any of these on a resource lets the principal see it.
	return op == OpDescribe && a.Permission == Allow && a.Operation != OpDescribe
}

// Authorizer decides requests by the ACLs. It is safe for concurrent use; decisions take
// a read lock.
type Authorizer struct {
	enabled    bool
	superUsers map[string]bool
	dir        string

	writeMu sync.Mutex // serialises changes with their file writes
	mu      sync.RWMutex
	rules   []ACL            // guarded by mu: every rule, in insertion order
	byPrinc map[string][]ACL // guarded by mu: rules by principal (AnyPrincipal too)
}

// ACLFile is the rules' file in the data directory.
const ACLFile = "acls.json"

// aclsMax bounds the rules a broker keeps (and the file: ~200 bytes a rule).
const aclsMax = 100000

type aclFile struct {
	Format int           `json:"format"`
	ACLs   []aclFileRule `json:"acls"`
}

type aclFileRule struct {
	Resource   string `json:"resource"`
	Name       string `json:"name"`
	Pattern    string `json:"pattern"`
	Principal  string `json:"principal"`
	Operation  string `json:"operation"`
	Permission string `json:"permission"`
}

// OpenAuthorizer loads dir's ACL file. With enabled false every decision allows (the
// rules can still be administered, to be in place when ACLs are switched on). Super-users
// ("User:NAME") are allowed everything either way.
func OpenAuthorizer(dir string, enabled bool, superUsers []string) (*Authorizer, error) {
	a := &Authorizer{enabled: enabled, superUsers: map[string]bool{}, dir: dir, byPrinc: map[string][]ACL{}}
	for _, p := range superUsers {
		if !ValidPrincipal(p) || p == AnyPrincipal {
			return nil, fmt.Errorf("super-user %q: want User:NAME", p)
		}
		a.superUsers[p] = true
	}
	data, err := readSmallFile(dir, ACLFile, aclsMax*512)
	if err != nil || data == nil {
		return a, err
	}
	rules, err := decodeACLFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ACLFile, err)
	}
	a.install(rules)
	return a, nil
}

// decodeACLFile decodes the ACL file's contents into valid rules, at most aclsMax.
func decodeACLFile(data []byte) ([]ACL, error) {
	var f aclFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Format != 1 {
		return nil, fmt.Errorf("format %d, want 1", f.Format)
	}
	if len(f.ACLs) > aclsMax {
		return nil, fmt.Errorf("%d rules: the most a broker keeps is %d", len(f.ACLs), aclsMax)
	}
	rules := make([]ACL, 0, len(f.ACLs))
	for i, r := range f.ACLs {
		acl, err := r.parse()
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		rules = append(rules, acl)
	}
	return rules, nil
}

func (r aclFileRule) parse() (ACL, error) {
	var acl ACL
	var err error
	if acl.Resource, err = ParseResourceType(r.Resource); err != nil {
		return acl, err
	}
	if acl.Pattern, err = ParsePatternType(r.Pattern); err != nil {
		return acl, err
	}
	if acl.Operation, err = ParseOperation(r.Operation); err != nil {
		return acl, err
	}
	if acl.Permission, err = ParsePermission(r.Permission); err != nil {
		return acl, err
	}
	acl.Name, acl.Principal = r.Name, r.Principal
	return acl, acl.Validate()
}

// install replaces the rules and their index.
func (a *Authorizer) install(rules []ACL) {
	index := map[string][]ACL{}
	for _, r := range rules {
		index[r.Principal] = append(index[r.Principal], r)
	}
	a.mu.Lock()
	a.rules, a.byPrinc = rules, index
	a.mu.Unlock()
}

// Enabled reports whether decisions apply the rules (--acl on).
func (a *Authorizer) Enabled() bool { return a.enabled }

// IsSuperUser reports whether principal is one of the super-users.
func (a *Authorizer) IsSuperUser(principal string) bool { return a.superUsers[principal] }

// Authorize decides whether principal may do op on the resource (rt, name).
func (a *Authorizer) Authorize(principal string, op Operation, rt ResourceType, name string) bool {
	if !a.enabled || a.superUsers[principal] {
		return true
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	allowed := false
	for _, rules := range [2][]ACL{a.byPrinc[principal], a.byPrinc[AnyPrincipal]} {
		for _, r := range rules {
			if !r.covers(op, rt, name) {
				continue
			}
			if r.Permission == Deny {
				return false
			}
			allowed = true
		}
	}
	return allowed
}

// Denial is the error message of a refused decision: "User:bob may not write topic \"t\""
// (the cluster: "User:bob may not describe the cluster"). Both listeners word refusals so.
func Denial(principal string, op Operation, rt ResourceType, name string) string {
	if rt == ResourceCluster {
		return fmt.Sprintf("%s may not %s the cluster", principal, op)
	}
	return fmt.Sprintf("%s may not %s %s %q", principal, op, rt, name)
}

// List returns the rules filter matches, in insertion order.
func (a *Authorizer) List(filter ACL) []ACL {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []ACL
	for _, r := range a.rules {
		if filter.Matches(r) {
			out = append(out, r)
		}
	}
	return out
}

// Add adds rules (one already present is kept once) and writes the file. Every rule is
// validated first; nothing is added if one is invalid.
func (a *Authorizer) Add(rules []ACL) error {
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
	}
	return a.change(func(cur []ACL) ([]ACL, error) {
		for _, r := range rules {
			if !containsACL(cur, r) {
				cur = append(cur, r)
			}
		}
		if len(cur) > aclsMax {
			return nil, fmt.Errorf("%d rules: the most a broker keeps is %d", len(cur), aclsMax)
		}
		return cur, nil
	})
}

// Remove deletes every rule some filter matches and returns them.
func (a *Authorizer) Remove(filters []ACL) ([]ACL, error) {
	var removed []ACL
	err := a.change(func(cur []ACL) ([]ACL, error) {
		var keep []ACL
		for _, r := range cur {
			matched := false
			for _, f := range filters {
				matched = matched || f.Matches(r)
			}
			if matched {
				removed = append(removed, r)
			} else {
				keep = append(keep, r)
			}
		}
		return keep, nil
	})
	return removed, err
}

func containsACL(rules []ACL, r ACL) bool {
	for _, x := range rules {
		if x == r {
			return true
		}
	}
	return false
}

func (a *Authorizer) change(fn func([]ACL) ([]ACL, error)) error {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	a.mu.RLock()
	cur := append([]ACL(nil), a.rules...)
	a.mu.RUnlock()
	next, err := fn(cur)
	if err != nil {
		return err
	}
	f := aclFile{Format: 1, ACLs: make([]aclFileRule, 0, len(next))}
	for _, r := range next {
		f.ACLs = append(f.ACLs, aclFileRule{r.Resource.String(), r.Name, r.Pattern.String(), r.Principal, r.Operation.String(), r.Permission.String()})
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(a.dir, ACLFile, append(data, '\n')); err != nil {
		return err
	}
	a.install(next)
	return nil
}

// AllowsAny reports whether principal may do op on some resource of type rt: an allow
// rule of its own or of every principal, for op or All (deny rules on particular
// resources are not weighed: they apply when a request names the resource).
func (a *Authorizer) AllowsAny(principal string, op Operation, rt ResourceType) bool {
	if !a.enabled || a.superUsers[principal] {
		return true
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, rules := range [2][]ACL{a.byPrinc[principal], a.byPrinc[AnyPrincipal]} {
		for _, r := range rules {
			if r.Resource == rt && r.Permission == Allow && (r.Operation == op || r.Operation == OpAll) {
				return true
			}
		}
	}
	return false
}
