package security

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ringlog/ringlog/netio/security/scram"
)

// The broker reads its ACL and credentials files at start-up and trusts what they hold: a
// corrupt or hand-edited file must be an error, never a panic, never a rule or credential
// that the checks on AlterAcls/AlterUsers would refuse, and never more than the broker keeps.

// FuzzDecodeACLFile: decoded rules are valid and at most aclsMax, and re-encode (as the
// broker saves them) to the same rules.
func FuzzDecodeACLFile(f *testing.F) {
	f.Add([]byte(`{"format":1,"acls":[]}`))
	f.Add([]byte(`{"format":1,"acls":[{"resource":"topic","name":"orders","pattern":"literal","principal":"User:alice","operation":"read","permission":"allow"}]}`))
	f.Add([]byte(`{"format":1,"acls":[{"resource":"cluster","name":"","pattern":"prefixed","principal":"User:*","operation":"alter","permission":"deny"}]}`))
	f.Add([]byte(`{"format":1,"acls":[{"resource":"group","name":"","pattern":"literal","principal":"alice","operation":"read","permission":"allow"}]}`))
	f.Add([]byte(`{"format":2}`))
	f.Add([]byte(`{"format":1,"acls":null}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := decodeACLFile(data)
		if err != nil {
			return
		}
		if len(rules) > aclsMax {
			t.Fatalf("kept %d rules, most %d", len(rules), aclsMax)
		}
		file := aclFile{Format: 1, ACLs: []aclFileRule{}}
		for i, r := range rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("rule %d %+v loaded though invalid: %v", i, r, err)
			}
			file.ACLs = append(file.ACLs, aclFileRule{r.Resource.String(), r.Name, r.Pattern.String(), r.Principal, r.Operation.String(), r.Permission.String()})
		}
		saved, err := json.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeACLFile(saved)
		if err != nil || len(again) != len(rules) || (len(rules) > 0 && !reflect.DeepEqual(again, rules)) {
			t.Fatalf("saved rules reload as %+v, %v; want %+v", again, err, rules)
		}
	})
}

// FuzzDecodeCredentialsFile: loaded users have valid names and valid credentials of known
// mechanisms, at most usersMax.
func FuzzDecodeCredentialsFile(f *testing.F) {
	key := make([]byte, 32)
	secret := storedSecret{Salt: []byte("salt"), Iterations: 4096, StoredKey: key, ServerKey: key}
	good, _ := json.Marshal(credentialsFile{Format: 1, Users: map[string]map[string]storedSecret{"alice": {"SCRAM-SHA-256": secret}}})
	f.Add(good)
	bad, _ := json.Marshal(credentialsFile{Format: 1, Users: map[string]map[string]storedSecret{"bob!": {"SCRAM-SHA-256": secret}}})
	f.Add(bad)
	f.Add([]byte(`{"format":1,"users":{"a":{"SCRAM-SHA-512":{"salt":"","iterations":-1}}}}`))
	f.Add([]byte(`{"format":1,"users":{"a":{}}}`))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		users, err := decodeCredentialsFile(data)
		if err != nil {
			return
		}
		if len(users) > usersMax {
			t.Fatalf("kept %d users, most %d", len(users), usersMax)
		}
		for user, mechs := range users {
			if ValidUserName(user) != nil {
				t.Fatalf("loaded invalid user name %q", user)
			}
			for name, cred := range mechs {
				if m := scram.ByName(name); m == nil || !m.Valid(cred) {
					t.Fatalf("user %q: loaded an invalid %s credential %+v", user, name, cred)
				}
			}
		}
	})
}

// FuzzParseQuotaOverrides: the --quota-overrides flag parses to non-negative rates for
// well-formed entities only.
func FuzzParseQuotaOverrides(f *testing.F) {
	for _, s := range []string{
		"User:bulk=produce:100 ; client-id:etl=fetch:0,requests:5", "group:replay=fetch:1000",
		"group:replay=produce:1", "User:a=produce:-1", "x=fetch:1", "User:a=fetch:1;User:a=fetch:2", "", ";;",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		overrides, err := ParseQuotaOverrides(s)
		if err != nil {
			return
		}
		for entity, r := range overrides {
			if entity == "" || r.ProduceBytesPerSec < 0 || r.FetchBytesPerSec < 0 || r.RequestsPerSec < 0 {
				t.Fatalf("%q: override %q: %+v", s, entity, r)
			}
		}
	})
}
