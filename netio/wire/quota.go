package wire

// ---------------------------------------------------------------------------------------
// QuotaGroup (key 39): the consumer group a connection's fetches are charged to
// (docs/protocol.md "QuotaGroup", docs/security.md "Per-group fetch quotas"). Its layout,
// like every schema's, is part of the wire format.

// QuotaGroupRequest states the group whose fetch quota covers the fetches sent on this
// connection from now on; an empty Group clears it.
type QuotaGroupRequest struct {
	Group string
}

// QuotaGroupResponse accepts (ErrNone) or refuses the group: ErrInvalidGroupID for a name
// too long, ErrGroupAuthorizationFailed when the principal may not read the group.
type QuotaGroupResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
}

func (*QuotaGroupRequest) API() APIKey  { return APIQuotaGroup }
func (*QuotaGroupResponse) API() APIKey { return APIQuotaGroup }

func (m *QuotaGroupRequest) AppendTo(dst []byte) []byte { return appendString(dst, m.Group) }

func (m *QuotaGroupRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	return r.done("QuotaGroup request")
}

func (m *QuotaGroupResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	return appendString(dst, m.ErrorMessage)
}

func (m *QuotaGroupResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	return r.done("QuotaGroup response")
}
