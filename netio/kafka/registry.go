package kafka

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka API keys this package names (the numbers are Kafka's wire format).
const (
	keyProduce              int16 = 0
	keyFetch                int16 = 1
	keyListOffsets          int16 = 2
	keyMetadata             int16 = 3
	keyOffsetCommit         int16 = 8
	keyOffsetFetch          int16 = 9
	keyFindCoordinator      int16 = 10
	keyJoinGroup            int16 = 11
	keyHeartbeat            int16 = 12
	keyLeaveGroup           int16 = 13
	keySyncGroup            int16 = 14
	keyDescribeGroups       int16 = 15
	keyListGroups           int16 = 16
	keySaslHandshake        int16 = 17
	keyApiVersions          int16 = 18
	keyCreateTopics         int16 = 19
	keyDeleteTopics         int16 = 20
	keyInitProducerID       int16 = 22
	keyOffsetForLeaderEpoch int16 = 23
	keySaslAuthenticate     int16 = 36
	keyDescribeConfigs      int16 = 32
	keyCreatePartitions     int16 = 37
)

// api is one served API: the versions served, the handler, and how to answer a request of
// it with an error on every entry (entries over the limit, an unsupported version).
type api struct {
	key      int16
	min, max int16
	// serve handles a decoded request and calls p.reply (or p.replyEncoded) exactly once,
	// now or later, from any goroutine. It runs on the connection's reader goroutine, so
	// anything that can block (an fsync, waiting for every shard) goes to a goroutine.
	serve func(s *Server, p *pending, req kmsg.Request)
	// fail answers req with code (and msg where the response has a message) on every
	// entry it names.
	fail func(req kmsg.Request, code int16, msg string) kmsg.Response
	// entries counts what req names (topics, partitions, names), for RequestEntriesMax.
	entries func(req kmsg.Request) int
}

// served is every API this listener answers, one file each (api_*.go). ApiVersions
// advertises exactly this table. Filled by init (ApiVersions' own entry refers to it).
var served = map[int16]*api{}

func init() {
	for _, a := range []*api{
		&apiVersionsAPI, &produceAPI, &fetchAPI, &listOffsetsAPI, &metadataAPI,
		&createTopicsAPI, &deleteTopicsAPI, &createPartitionsAPI, &describeConfigsAPI,
		&initProducerIDAPI, &offsetForLeaderEpochAPI,
		&findCoordinatorAPI, &joinGroupAPI, &syncGroupAPI, &heartbeatAPI, &leaveGroupAPI,
		&offsetCommitAPI, &offsetFetchAPI, &listGroupsAPI, &describeGroupsAPI,
		&saslHandshakeAPI, &saslAuthenticateAPI,
	} {
		if kmsg.RequestForKey(a.key) == nil || a.max > kmsg.RequestForKey(a.key).MaxVersion() || a.min > a.max {
			panic(fmt.Sprintf("kafka: API %d registered with versions %d..%d that kmsg cannot decode", a.key, a.min, a.max))
		}
		served[a.key] = a
	}
}

// servedKeys lists the served keys in order (ApiVersions answers in this order).
func servedKeys() []int16 {
	keys := make([]int16, 0, len(served))
	for k := range served {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// dispatch decodes p's frame and hands it to its API, or answers with the protocol's error:
//
//   - an ApiVersions version above ours: a v0 ApiVersions response with UNSUPPORTED_VERSION
//     and our table (KIP-511), so the client retries with a version we serve;
//   - a served API at a version outside our range, or an API kmsg knows that we do not
//     serve: the response at the requested version with UNSUPPORTED_VERSION on every entry
//     (served APIs) or in its top-level error code (other APIs that have one);
//   - a served API other than ApiVersions, SaslHandshake and SaslAuthenticate on a connection
//     that has not authenticated while authentication is required: SASL_AUTHENTICATION_FAILED
//     in the top-level error code where the response has one, then the connection closes
//     (refuseUnauthenticated);
//   - a request the ACLs refuse, wholly or in part, gets Kafka's authorization error codes
//     (authorize.go); the rest of it goes to its API;
//   - otherwise (a key or version no Kafka schema we know decodes, a body that does not
//     decode): there is no response the client could read, so the connection is closed
//     after a log line naming the client, key and version — what Kafka brokers do.
func (s *Server) dispatch(p *pending) {
	frame := p.body
	p.body = nil
	h := &p.hdr
	req := kmsg.RequestForKey(h.key)
	if req == nil {
		s.closeWith(p, fmt.Sprintf("API key %d is not a Kafka API", h.key))
		return
	}
	a := served[h.key]
	if h.key == keyApiVersions && (h.version < 0 || h.version > a.max) {
		p.reply(apiVersionsResponse(0, kerr.UnsupportedVersion.Code), nil)
		return
	}
	if h.version < 0 || h.version > req.MaxVersion() {
		s.closeWith(p, fmt.Sprintf("%s v%d: no schema for that version", kmsg.NameForKey(h.key), h.version))
		return
	}
	if err := decodeRequest(h, req, frame); err != nil {
		s.closeWith(p, fmt.Sprintf("%s v%d: undecodable request: %v", kmsg.NameForKey(h.key), h.version, err))
		return
	}
	p.quotaKey = s.quotaKey(p)
	switch {
	case a == nil:
		resp := req.ResponseKind()
		resp.SetVersion(h.version)
		if !setTopLevelError(resp, kerr.UnsupportedVersion.Code) {
			s.closeWith(p, fmt.Sprintf("%s is not served and its response has no top-level error code", kmsg.NameForKey(h.key)))
			return
		}
		p.reply(resp, nil)
	case h.version < a.min || h.version > a.max:
		p.reply(a.fail(req, kerr.UnsupportedVersion.Code, fmt.Sprintf("%s v%d: this broker serves v%d to v%d", kmsg.NameForKey(h.key), h.version, a.min, a.max)), nil)
	case s.authRequired() && p.c.sess.principal == "" && !preAuth(h.key):
		s.refuseUnauthenticated(p, req)
	case a.entries != nil && a.entries(req) > s.limits.RequestEntriesMax:
		p.reply(a.fail(req, kerr.InvalidRequest.Code, fmt.Sprintf("request names %d entries, more than the broker's %d (RequestEntriesMax)", a.entries(req), s.limits.RequestEntriesMax)), nil)
	case s.authorize(p, a, req):
	default:
		a.serve(s, p, req)
	}
}

// decodeRequest reads frame's client id and body into req at h's version.
func decodeRequest(h *requestHeader, req kmsg.Request, frame []byte) error {
	req.SetVersion(h.version)
	body, err := parseClientID(h, frame, req.IsFlexible())
	if err != nil {
		return err
	}
	return req.ReadFrom(body)
}

// closeWith answers p with nothing and closes the connection after the responses before it.
func (s *Server) closeWith(p *pending, why string) {
	s.logf("kafka: closing connection from %s (client id %q, correlation id %d): %s", p.c.remote, p.hdr.clientID, p.hdr.correlationID, why)
	p.fatal = true
	p.reply(nil, nil)
}

// setTopLevelError sets resp's top-level ErrorCode field; false when it has none.
func setTopLevelError(resp kmsg.Response, code int16) bool {
	v := reflect.ValueOf(resp).Elem()
	f := v.FieldByName("ErrorCode")
	if !f.IsValid() || f.Kind() != reflect.Int16 {
		return false
	}
	f.SetInt(int64(code))
	return true
}

// str returns a pointer to s, for kmsg's nullable strings.
func str(s string) *string { return &s }
