package wire

// Security APIs (docs/protocol.md "Security"): the SASL handshake and exchange, SCRAM
// credential administration and ACL administration. Their layouts, like every schema's,
// are part of the wire format.

// ---------------------------------------------------------------------------------------
// SaslHandshake (key 11)

// SaslHandshakeRequest names the SASL mechanism the client wants (e.g. SCRAM-SHA-512).
type SaslHandshakeRequest struct {
	Mechanism string
}

// SaslHandshakeResponse accepts the mechanism (ErrNone) or refuses it
// (ErrUnsupportedSaslMechanism); Mechanisms lists what the broker offers either way.
type SaslHandshakeResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Mechanisms   []string
}

func (*SaslHandshakeRequest) API() APIKey  { return APISaslHandshake }
func (*SaslHandshakeResponse) API() APIKey { return APISaslHandshake }

func (m *SaslHandshakeRequest) AppendTo(dst []byte) []byte { return appendString(dst, m.Mechanism) }

func (m *SaslHandshakeRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Mechanism = r.string()
	return r.done("SaslHandshake request")
}

func (m *SaslHandshakeResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	return appendStrings(dst, m.Mechanisms, false)
}

func (m *SaslHandshakeResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Mechanisms = readStrings(&r)
	return r.done("SaslHandshake response")
}

// ---------------------------------------------------------------------------------------
// SaslAuthenticate (key 12)

// SaslAuthenticateRequest carries one client message of the mechanism chosen by
// SaslHandshake (for SCRAM: client-first, then client-final).
type SaslAuthenticateRequest struct {
	AuthBytes []byte
}

// SaslAuthenticateResponse carries the server's next message. ErrSaslAuthenticationFailed
// ends the exchange and the broker closes the connection after this response. Principal is
// set once authentication succeeded (e.g. "User:alice").
type SaslAuthenticateResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	AuthBytes    []byte
	Principal    string
}

func (*SaslAuthenticateRequest) API() APIKey  { return APISaslAuthenticate }
func (*SaslAuthenticateResponse) API() APIKey { return APISaslAuthenticate }

func (m *SaslAuthenticateRequest) AppendTo(dst []byte) []byte { return appendBytes(dst, m.AuthBytes) }

func (m *SaslAuthenticateRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.AuthBytes = r.bytes()
	return r.done("SaslAuthenticate request")
}

func (m *SaslAuthenticateResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendBytes(dst, m.AuthBytes)
	return appendString(dst, m.Principal)
}

func (m *SaslAuthenticateResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.AuthBytes = r.bytes()
	m.Principal = r.string()
	return r.done("SaslAuthenticate response")
}

// ---------------------------------------------------------------------------------------
// DescribeUsers (key 13)

// DescribeUsersRequest lists SCRAM users: the named ones, or all for a null Users.
type DescribeUsersRequest struct {
	Users []string
}

// DescribeUsersResponse names each user's mechanisms and iteration counts, never a salt
// or a key.
type DescribeUsersResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Users        []UserDescription
}

type UserDescription struct {
	User       string
	Mechanisms []UserMechanism
}

type UserMechanism struct {
	Mechanism  string
	Iterations int32
}

func (*DescribeUsersRequest) API() APIKey  { return APIDescribeUsers }
func (*DescribeUsersResponse) API() APIKey { return APIDescribeUsers }

func (m *DescribeUsersRequest) AppendTo(dst []byte) []byte { return appendStrings(dst, m.Users, true) }

func (m *DescribeUsersRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Users = readStrings(&r)
	return r.done("DescribeUsers request")
}

func (m *DescribeUsersResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendArrayLen(dst, len(m.Users), false, false)
	for _, u := range m.Users {
		dst = appendString(dst, u.User)
		dst = appendArrayLen(dst, len(u.Mechanisms), false, false)
		for _, mech := range u.Mechanisms {
			dst = appendString(dst, mech.Mechanism)
			dst = appendInt32(dst, mech.Iterations)
		}
	}
	return dst
}

func (m *DescribeUsersResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Users = makeSlice[UserDescription](r.arrayLen(2 + 4))
	for i := range m.Users {
		u := &m.Users[i]
		u.User = r.string()
		u.Mechanisms = makeSlice[UserMechanism](r.arrayLen(2 + 4))
		for j := range u.Mechanisms {
			u.Mechanisms[j] = UserMechanism{r.string(), r.int32()}
		}
	}
	return r.done("DescribeUsers response")
}

// ---------------------------------------------------------------------------------------
// AlterUsers (key 14)

// AlterUsersRequest sets and deletes SCRAM credentials. An upsertion carries the salted
// password (PBKDF2 output), computed by the client: the password itself never travels.
type AlterUsersRequest struct {
	Upsertions []UserUpsertion
	Deletions  []UserDeletion
}

type UserUpsertion struct {
	User           string
	Mechanism      string
	Iterations     int32
	Salt           []byte
	SaltedPassword []byte
}

// UserDeletion removes one mechanism's credential of a user, or every one with an empty
// Mechanism.
type UserDeletion struct {
	User      string
	Mechanism string
}

// AlterUsersResponse has one result per upsertion, then one per deletion, in order.
type AlterUsersResponse struct {
	Results []UserResult
}

type UserResult struct {
	User         string
	ErrorCode    ErrorCode
	ErrorMessage string
}

func (*AlterUsersRequest) API() APIKey  { return APIAlterUsers }
func (*AlterUsersResponse) API() APIKey { return APIAlterUsers }

func (m *AlterUsersRequest) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Upsertions), false, false)
	for _, u := range m.Upsertions {
		dst = appendString(dst, u.User)
		dst = appendString(dst, u.Mechanism)
		dst = appendInt32(dst, u.Iterations)
		dst = appendBytes(dst, u.Salt)
		dst = appendBytes(dst, u.SaltedPassword)
	}
	dst = appendArrayLen(dst, len(m.Deletions), false, false)
	for _, d := range m.Deletions {
		dst = appendString(dst, d.User)
		dst = appendString(dst, d.Mechanism)
	}
	return dst
}

func (m *AlterUsersRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Upsertions = makeSlice[UserUpsertion](r.arrayLen(2 + 2 + 4 + 4 + 4))
	for i := range m.Upsertions {
		m.Upsertions[i] = UserUpsertion{r.string(), r.string(), r.int32(), r.bytes(), r.bytes()}
	}
	m.Deletions = makeSlice[UserDeletion](r.arrayLen(2 + 2))
	for i := range m.Deletions {
		m.Deletions[i] = UserDeletion{r.string(), r.string()}
	}
	return r.done("AlterUsers request")
}

func (m *AlterUsersResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Results), false, false)
	for _, v := range m.Results {
		dst = appendString(dst, v.User)
		dst = appendInt16(dst, int16(v.ErrorCode))
		dst = appendString(dst, v.ErrorMessage)
	}
	return dst
}

func (m *AlterUsersResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Results = makeSlice[UserResult](r.arrayLen(2 + 2 + 2))
	for i := range m.Results {
		m.Results[i] = UserResult{r.string(), ErrorCode(r.int16()), r.string()}
	}
	return r.done("AlterUsers response")
}

// ---------------------------------------------------------------------------------------
// ACLs: DescribeAcls (key 15), CreateAcls (key 16), DeleteAcls (key 17)

// ACL resource types, pattern types, operations and permissions as carried on the wire
// (int8). 0 is "any" in a filter and invalid in a binding.
const (
	ACLResourceTopic   int8 = 1
	ACLResourceGroup   int8 = 2
	ACLResourceCluster int8 = 3

	ACLPatternLiteral  int8 = 1
	ACLPatternPrefixed int8 = 2

	ACLOperationAll      int8 = 1
	ACLOperationRead     int8 = 2
	ACLOperationWrite    int8 = 3
	ACLOperationCreate   int8 = 4
	ACLOperationDelete   int8 = 5
	ACLOperationDescribe int8 = 6
	ACLOperationAlter    int8 = 7

	ACLPermissionDeny  int8 = 1
	ACLPermissionAllow int8 = 2
)

// ACLBinding is one rule: Permission for Principal to do Operation on the resources that
// ResourceName names (exactly, or as a prefix).
type ACLBinding struct {
	ResourceType int8
	ResourceName string
	PatternType  int8
	Principal    string
	Operation    int8
	Permission   int8
}

// aclBindingBytesMin is the smallest encoded binding (two empty strings).
const aclBindingBytesMin = 1 + 2 + 1 + 2 + 1 + 1

func appendACL(dst []byte, b ACLBinding) []byte {
	dst = appendInt8(dst, b.ResourceType)
	dst = appendString(dst, b.ResourceName)
	dst = appendInt8(dst, b.PatternType)
	dst = appendString(dst, b.Principal)
	dst = appendInt8(dst, b.Operation)
	return appendInt8(dst, b.Permission)
}

func readACL(r *reader) ACLBinding {
	return ACLBinding{r.int8(), r.string(), r.int8(), r.string(), r.int8(), r.int8()}
}

func appendACLs(dst []byte, bs []ACLBinding) []byte {
	dst = appendArrayLen(dst, len(bs), false, false)
	for _, b := range bs {
		dst = appendACL(dst, b)
	}
	return dst
}

func readACLs(r *reader) []ACLBinding {
	bs := makeSlice[ACLBinding](r.arrayLen(aclBindingBytesMin))
	for i := range bs {
		bs[i] = readACL(r)
	}
	return bs
}

// DescribeAclsRequest lists the bindings matching Filter: a zero field or an empty string
// matches anything.
type DescribeAclsRequest struct {
	Filter ACLBinding
}

type DescribeAclsResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	ACLs         []ACLBinding
}

// CreateAclsRequest adds bindings (adding one that exists changes nothing).
type CreateAclsRequest struct {
	ACLs []ACLBinding
}

// CreateAclsResponse has one result per binding, in order; Topic is unused ("").
type CreateAclsResponse struct {
	Results []TopicResult
}

// DeleteAclsRequest removes every binding matching any of Filters (matching as in
// DescribeAclsRequest).
type DeleteAclsRequest struct {
	Filters []ACLBinding
}

type DeleteAclsResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Deleted      []ACLBinding
}

func (*DescribeAclsRequest) API() APIKey  { return APIDescribeAcls }
func (*DescribeAclsResponse) API() APIKey { return APIDescribeAcls }
func (*CreateAclsRequest) API() APIKey    { return APICreateAcls }
func (*CreateAclsResponse) API() APIKey   { return APICreateAcls }
func (*DeleteAclsRequest) API() APIKey    { return APIDeleteAcls }
func (*DeleteAclsResponse) API() APIKey   { return APIDeleteAcls }

func (m *DescribeAclsRequest) AppendTo(dst []byte) []byte { return appendACL(dst, m.Filter) }

func (m *DescribeAclsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Filter = readACL(&r)
	return r.done("DescribeAcls request")
}

func (m *DescribeAclsResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	return appendACLs(dst, m.ACLs)
}

func (m *DescribeAclsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.ACLs = readACLs(&r)
	return r.done("DescribeAcls response")
}

func (m *CreateAclsRequest) AppendTo(dst []byte) []byte { return appendACLs(dst, m.ACLs) }

func (m *CreateAclsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ACLs = readACLs(&r)
	return r.done("CreateAcls request")
}

func (m *CreateAclsResponse) AppendTo(dst []byte) []byte { return appendTopicResults(dst, m.Results) }

func (m *CreateAclsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Results = readTopicResults(&r)
	return r.done("CreateAcls response")
}

func (m *DeleteAclsRequest) AppendTo(dst []byte) []byte { return appendACLs(dst, m.Filters) }

func (m *DeleteAclsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Filters = readACLs(&r)
	return r.done("DeleteAcls request")
}

func (m *DeleteAclsResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	return appendACLs(dst, m.Deleted)
}

func (m *DeleteAclsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Deleted = readACLs(&r)
	return r.done("DeleteAcls response")
}
