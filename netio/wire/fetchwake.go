package wire

// ---------------------------------------------------------------------------------------
// ReplicaFetchWake (key 31): a follower asks the leader to answer now the ReplicaFetch it
// has parked on this connection (docs/protocol.md "ReplicaFetchWake", docs/replication.md
// "Lanes"). Its layout, like every schema's, is part of the wire format.

// ReplicaFetchWakeRequest ends the long-poll of the ReplicaFetch outstanding on the same
// connection: the leader answers that fetch at once with what it has (records or none),
// then this request. Sent while the fetch is parked, after it on the connection, so the
// two answers come back in that order. ReplicaID is the sender's broker id.
type ReplicaFetchWakeRequest struct {
	ReplicaID int32
}

// ReplicaFetchWakeResponse: Woken reports whether a fetch was still parked (false: it was
// answered before the request arrived). A broker that is not part of a cluster answers
// ErrUnknownAPI in the frame header, as one of a release without this API does.
type ReplicaFetchWakeResponse struct {
	Woken bool
}

func (*ReplicaFetchWakeRequest) API() APIKey  { return APIReplicaFetchWake }
func (*ReplicaFetchWakeResponse) API() APIKey { return APIReplicaFetchWake }

func (m *ReplicaFetchWakeRequest) AppendTo(dst []byte) []byte { return appendInt32(dst, m.ReplicaID) }

func (m *ReplicaFetchWakeRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ReplicaID = r.int32()
	return r.done("ReplicaFetchWake request")
}

func (m *ReplicaFetchWakeResponse) AppendTo(dst []byte) []byte { return appendBool(dst, m.Woken) }

func (m *ReplicaFetchWakeResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Woken = r.bool()
	return r.done("ReplicaFetchWake response")
}
