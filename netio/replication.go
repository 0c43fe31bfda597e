package netio

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
)

// WithCluster makes the handler serve a broker of a replicated cluster: clients' produces,
// fetches and list-offsets reach only partitions this broker leads (others answer
// NOT_LEADER_OR_WRONG_SHARD), topics are created through the controller, and the
// broker-to-broker APIs (ReplicaFetch, OffsetsForLeaderEpoch, Controller) are served.
// Call it before serving.
func (h *BrokerHandler) WithCluster(m *cluster.Manager) *BrokerHandler {
	h.cluster = m
	h.brokerID = m.NodeID()
	return h
}

// clusterMetadata fills a Metadata answer's cluster fields from this broker's view of the
// controller metadata: each partition's leader, leader epoch, replicas and ISR, the high
// watermark of the partitions this broker leads, the brokers and the controller leader.
// Version 0 carries only the leader epoch of these; the encoder leaves the rest out. The
// response's Replicas and ISR share the metadata's slices, which are read-only (the
// encoder only reads them).
func (h *BrokerHandler) clusterMetadata(resp *wire.MetadataResponse, v *cluster.View) {
	resp.ControllerID = v.ControllerLeader
	if resp.ControllerID <= 0 {
		resp.ControllerID = -1
	}
	ids := make([]int32, 0, len(v.Metadata.Brokers))
	for id := range v.Metadata.Brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b := v.Metadata.Brokers[id]
		resp.Brokers = append(resp.Brokers, wire.MetadataBroker{NodeID: b.ID, Address: b.Address, Rack: b.Rack, Fenced: b.Fenced})
	}
	for i := range resp.Topics {
		mt := &resp.Topics[i]
		ct := v.Metadata.Topics[mt.Topic]
		for j := range mt.Partitions {
			mp := &mt.Partitions[j]
			mp.Leader = controller.NoLeader
			if ct == nil || int(mp.Partition) >= len(ct.Partitions) {
				continue // a local topic the controller does not know (yet)
			}
			cp := &ct.Partitions[mp.Partition]
			mp.Leader, mp.LeaderEpoch, mp.Replicas, mp.ISR = cp.Leader, cp.LeaderEpoch, cp.Replicas, cp.ISR
			if hwm, ok := v.HighWatermarks[mt.Topic+"/"+strconv.Itoa(int(mp.Partition))]; ok {
				mp.HighWatermark = hwm
			}
		}
	}
}

// unopenedTopic describes a replicated topic the controller's metadata holds but this
// broker has not opened yet (its reconcile is under way, or failed): every partition,
// on no shard of this broker (-1); clusterMetadata adds the leaders. As Kafka describes a
// topic from its metadata cache: clients route to the leaders, and one that asks this
// broker is answered NOT_LEADER_OR_WRONG_SHARD (retriable) rather than told the topic
// does not exist.
func unopenedTopic(name string, ct *controller.Topic) wire.MetadataTopic {
	mt := wire.MetadataTopic{Topic: name, Partitions: make([]wire.MetadataPartition, len(ct.Partitions))}
	for i := range mt.Partitions {
		mt.Partitions[i] = wire.MetadataPartition{Partition: int32(i), Shard: -1, Leader: controller.NoLeader, HighWatermark: -1}
	}
	return mt
}

// checkLeader is nil when this broker may serve clients for tp.
func (h *BrokerHandler) checkLeader(tp shard.TopicPartition) error {
	if h.cluster == nil {
		return nil
	}
	return h.cluster.CheckLeader(tp)
}

// clusterCodeFor maps the errors of replication to protocol codes; ErrNone when none fits.
func clusterCodeFor(err error) wire.ErrorCode {
	var code wire.ErrorCode
	switch {
	case errors.Is(err, isr.ErrNotLeader):
		return wire.ErrNotLeaderOrWrongShard
	case errors.Is(err, isr.ErrFencedLeaderEpoch):
		return wire.ErrFencedLeaderEpoch
	case errors.Is(err, isr.ErrUnknownLeaderEpoch), errors.Is(err, isr.ErrNotReplica):
		return wire.ErrUnknownLeaderEpoch
	case errors.Is(err, isr.ErrOffsetOutOfRange):
		return wire.ErrOffsetOutOfRange
	case errors.Is(err, cluster.ErrTimedOut): // before the causes it names
		return wire.ErrRequestTimedOut
	case errors.Is(err, controller.ErrNotController), errors.Is(err, cluster.ErrNoController):
		return wire.ErrNotController
	case errors.Is(err, controller.ErrTopicExists):
		return wire.ErrTopicAlreadyExists
	case errors.Is(err, controller.ErrNotEnoughBrokers):
		return wire.ErrInvalidReplication
	case errors.Is(err, controller.ErrInvalidTopic):
		return wire.ErrInvalidPartitions
	case errors.Is(err, controller.ErrUnknownTopic), errors.Is(err, controller.ErrTopicIDMismatch):
		return wire.ErrUnknownTopicOrPartition
	case errors.Is(err, controller.ErrUnsupportedProtocolVersion):
		return wire.ErrUnsupportedProtocolVersion
	case errors.Is(err, controller.ErrInvalidFinalizedVersion):
		return wire.ErrInvalidFinalizedVersion
	case errors.As(err, &code):
		return code
	}
	return wire.ErrNone
}

func (h *BrokerHandler) createReplicated(t wire.CreateTopic, timeoutMs int32) error {
	rf := int32(t.ReplicationFactor)
	if rf == -1 {
		rf = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), RequestAdminTimeout(timeoutMs))
	defer cancel()
	return h.cluster.CreateTopic(ctx, t.Topic, t.Partitions, rf, configMap(t.Configs))
}

// deleteReplicated deletes a replicated topic through the controller; it answers once
// this broker deleted its copy, or REQUEST_TIMED_OUT when timeoutMs (RequestAdminTimeout)
// passes first.
func (h *BrokerHandler) deleteReplicated(name string, timeoutMs int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), RequestAdminTimeout(timeoutMs))
	defer cancel()
	return h.cluster.DeleteTopic(ctx, name)
}

// alterReplicated changes a replicated topic's config through the controller; it answers
// once this broker applied it, or REQUEST_TIMED_OUT after timeoutMs (AlterConfigs version
// 1; version 0, which carries none, as Kafka's IncrementalAlterConfigs, waits
// adminTimeout).
func (h *BrokerHandler) alterReplicated(name string, set map[string]string, deletes []string, timeoutMs int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), RequestAdminTimeout(timeoutMs))
	defer cancel()
	return h.cluster.AlterTopicConfig(ctx, name, set, deletes)
}

// adminTimeout bounds a replicated admin operation (a controller round trip and the local
// open of the replicas).
const adminTimeout = 30 * time.Second

// RequestAdminTimeout is how long a replicated create, delete or config change waits for
// the controller and the local open, removal or change: the request's own timeout
// (CreateTopics' and DeleteTopics' timeout_ms in both protocols, AlterConfigs' from the
// ringlog protocol's version 1), never above adminTimeout; adminTimeout when the request
// gives none (version 0 of the ringlog protocol read 0 or less so; version 1 and the Kafka
// listener answer that REQUEST_TIMED_OUT before they get here). Past it the change is
// answered REQUEST_TIMED_OUT (cluster.ErrTimedOut) and may still be applied.
func RequestAdminTimeout(timeoutMs int32) time.Duration {
	if timeoutMs <= 0 {
		return adminTimeout
	}
	return min(time.Duration(timeoutMs)*time.Millisecond, adminTimeout)
}

func (h *BrokerHandler) replicaFetch(req *Request, body *wire.ReplicaFetchRequest) {
	if h.cluster == nil {
		req.ReplyError(wire.ErrUnknownAPI, "this broker is not part of a cluster")
		return
	}
	if err := h.cluster.CheckPeerProtocol(body.ProtocolVersion); err != nil {
		req.ReplyError(wire.ErrUnsupportedProtocolVersion, err.Error())
		return
	}
	wake := &shard.FetchWake{} // ReplicaFetchWake on this connection ends the long-poll
	h.fetchWakes.Store(req.Conn.Session, wake)
	fr := &cluster.FetchRequest{ReplicaID: body.ReplicaID, Caller: caller(req), MaxWait: time.Duration(body.MaxWaitMs) * time.Millisecond,
		BytesMax: int32(min(int64(max(body.MaxBytes, 1)), h.fetchResponseBytesMax)), Wake: wake}
	for _, t := range body.Topics {
		for _, p := range t.Partitions {
			fr.Partitions = append(fr.Partitions, cluster.FetchPartition{
				TopicPartition: shard.TopicPartition{Topic: t.Topic, Partition: p.Partition},
				LeaderEpoch:    p.CurrentLeaderEpoch, Offset: p.FetchOffset, BytesMax: max(p.MaxBytes, 0),
			})
		}
	}
	h.cluster.ReplicaFetch(fr, func(answers []cluster.FetchAnswer) {
		h.fetchWakes.CompareAndDelete(req.Conn.Session, wake)
		resp := &wire.ReplicaFetchResponse{Topics: make([]wire.ReplicaFetchResponseTopic, len(body.Topics))}
		k := 0
		for i, t := range body.Topics {
			rt := &resp.Topics[i]
			rt.Topic = t.Topic
			rt.Partitions = make([]wire.ReplicaFetchResponsePartition, len(t.Partitions))
			for j := range t.Partitions {
				a := &answers[k]
				k++
				rt.Partitions[j] = wire.ReplicaFetchResponsePartition{
					Partition: a.Partition, ErrorCode: replicationCode(a.Err), ErrorMessage: errMessage(a.Err),
					HighWatermark: a.HighWatermark, LogStartOffset: -1, LogEndOffset: a.LogEndOffset, Records: a.Records,
				}
			}
		}
		req.ReplyMessage(resp)
	})
}

// replicaFetchWake answers the ReplicaFetch parked on this connection now (a follower's
// lane kick, cluster.FetchWaker), then this request. The fetch was dispatched before this
// request (requests are handled in arrival order), so its wake handle is registered
// unless it was answered already.
func (h *BrokerHandler) replicaFetchWake(req *Request) {
	if h.cluster == nil {
		req.ReplyError(wire.ErrUnknownAPI, "this broker is not part of a cluster")
		return
	}
	woken := false
	if v, ok := h.fetchWakes.Load(req.Conn.Session); ok {
		woken = v.(*shard.FetchWake).Wake()
	}
	req.ReplyMessage(&wire.ReplicaFetchWakeResponse{Woken: woken})
}

func replicationCode(err error) wire.ErrorCode {
	if err == nil {
		return wire.ErrNone
	}
	if c := clusterCodeFor(err); c != wire.ErrNone {
		return c
	}
	return codeFor(err)
}

func (h *BrokerHandler) offsetsForLeaderEpoch(body *wire.OffsetsForLeaderEpochRequest) *wire.OffsetsForLeaderEpochResponse {
	resp := &wire.OffsetsForLeaderEpochResponse{Topics: make([]wire.OffsetsForLeaderEpochResponseTopic, len(body.Topics))}
	for i, t := range body.Topics {
		rt := &resp.Topics[i]
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			out := wire.OffsetsForLeaderEpochResponsePartition{Partition: p.Partition, LeaderEpoch: -1, EndOffset: -1}
			if h.cluster == nil {
				out.ErrorCode, out.ErrorMessage = wire.ErrNotLeaderOrWrongShard, "this broker is not part of a cluster"
			} else {
				e, err := h.cluster.OffsetsForLeaderEpoch(shard.TopicPartition{Topic: t.Topic, Partition: p.Partition}, p.CurrentLeaderEpoch, p.LeaderEpoch)
				out.LeaderEpoch, out.EndOffset = e.Epoch, e.EndOffset
				out.ErrorCode, out.ErrorMessage = replicationCode(err), errMessage(err)
			}
			rt.Partitions = append(rt.Partitions, out)
		}
	}
	return resp
}

func (h *BrokerHandler) controllerOp(body *wire.ControllerRequest) *wire.ControllerResponse {
	if h.cluster == nil {
		return &wire.ControllerResponse{ErrorCode: wire.ErrNotController, ErrorMessage: "this broker is not part of a cluster"}
	}
	if err := h.cluster.CheckPeerProtocol(body.ProtocolVersion); err != nil {
		return &wire.ControllerResponse{ErrorCode: wire.ErrUnsupportedProtocolVersion, ErrorMessage: err.Error()}
	}
	out, err := h.cluster.HandleController(body.Op, body.Body)
	if err != nil {
		code := replicationCode(err)
		if code == wire.ErrUnknown {
			code = wire.ErrInvalidRequest
		}
		return &wire.ControllerResponse{ErrorCode: code, ErrorMessage: err.Error()}
	}
	return &wire.ControllerResponse{Body: out}
}

// ---- the peer side: a broker's connection to another broker ----

// peerFrameBytesMax bounds a response frame a peer may send (a replica fetch is bounded by
// the fetch size the follower asks for, 8 MiB, plus headers).
const peerFrameBytesMax = 64 << 20

// DialPeer connects to another broker for replication in plain TCP without a login
// (cluster.Dialer); PeerDialer.Dial is the same with TLS and SASL.
func DialPeer(ctx context.Context, addr string) (cluster.PeerConn, error) {
	return (&PeerDialer{}).Dial(ctx, addr)
}

// PeerDialer opens this broker's connections to the other brokers of its cluster (replica
// fetches, OffsetsForLeaderEpoch, forwarded controller commands) with the same security
// their client listeners demand of anyone (docs/security.md, "Broker-to-broker
// connections"). The zero value dials plain TCP without a login.
type PeerDialer struct {
	// TLS, if set, gives the client configuration of a dial to addr (called per dial, so
	// that a certificate reloaded on SIGHUP is presented from the next connection on).
	TLS func(addr string) (*tls.Config, error)
	// Credentials, if set, gives the SASL/SCRAM login run on every new connection (called
	// per dial: reloadable) whose listener did not ask for a client certificate (under
	// mutual TLS the certificate is the login and the principal). Unset: no login.
	Credentials func() security.PeerCredentials

	mu       sync.Mutex
	cache    scram.SaltCache          // guarded by mu: PBKDF2 once per (password, salt), not per dial
	cacheFor security.PeerCredentials // guarded by mu: the login cache was computed for
}

// ErrPeerAuthentication wraps a failure to log in to another broker: wrong inter-broker
// credentials, an unknown user, or a peer that failed to prove it holds them.
var ErrPeerAuthentication = errors.New("inter-broker authentication failed")

// Dial connects to the broker at addr (cluster.Dialer).
func (d *PeerDialer) Dial(ctx context.Context, addr string) (cluster.PeerConn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	certLogin := false // the peer asked for our certificate: it is the login (mutual TLS)
	if d.TLS != nil {
		cfg, err := d.TLS(addr)
		if err != nil {
			c.Close()
			return nil, err
		}
		if len(cfg.Certificates) > 0 && cfg.GetClientCertificate == nil {
			cfg = cfg.Clone()
			cert := &cfg.Certificates[0]
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				certLogin = true
				return cert, nil
			}
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS handshake with broker at %s: %w", addr, err)
		}
		c = tc
	}
	p := &peerConn{c: c}
	// A listener that asked for a certificate has authenticated us by it and refuses a SASL
	// login on top (ILLEGAL_SASL_STATE): log in only where it did not.
	if d.Credentials != nil && !certLogin {
		if err := d.login(ctx, p, addr); err != nil {
			c.Close()
			return nil, err
		}
	}
	return p, nil
}

// login runs SaslHandshake and the SCRAM exchange on a new connection. Errors name the
// address, the user and the mechanism, never the password.
func (d *PeerDialer) login(ctx context.Context, p *peerConn, addr string) error {
	creds := d.Credentials()
	fail := func(err error) error {
		return fmt.Errorf("%w: log in to broker at %s as %s: %w", ErrPeerAuthentication, addr, creds, err)
	}
	m := scram.ByName(creds.Mechanism)
	if m == nil {
		return fail(fmt.Errorf("mechanism %q unknown", creds.Mechanism))
	}
	var hs wire.SaslHandshakeResponse
	if err := p.roundTrip(ctx, &wire.SaslHandshakeRequest{Mechanism: m.Name}, &hs); err != nil {
		return fail(err)
	}
	if err := codeErr(hs.ErrorCode, hs.ErrorMessage); err != nil {
		return fail(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cacheFor != creds { // reloaded: the cached salted password is the old one's
		d.cache, d.cacheFor = scram.SaltCache{}, creds
	}
	err := m.NewClient(creds.User, creds.Password, &d.cache).Login(func(msg string) (string, error) {
		var resp wire.SaslAuthenticateResponse
		if err := p.roundTrip(ctx, &wire.SaslAuthenticateRequest{AuthBytes: []byte(msg)}, &resp); err != nil {
			return "", err
		}
		return string(resp.AuthBytes), codeErr(resp.ErrorCode, resp.ErrorMessage)
	})
	if err != nil {
		return fail(err)
	}
	return nil
}

// peerConn is a synchronous request/response connection (one request in flight), but
// for WakeFetch: the lane's kicker may send a ReplicaFetchWake behind the outstanding
// ReplicaFetch, whose answer the round trip reads after the fetch's.
type peerConn struct {
	c net.Conn
	// wmu serialises frame writes (the round trip's and WakeFetch's) and guards the state
	// below it up to in.
	wmu       sync.Mutex
	corr      uint32
	out       []byte
	wakeOut   []byte
	replicaID int32 // the last ReplicaFetch's: a wake names it
	fetching  bool  // a ReplicaFetch is outstanding
	wakes     int   // wakes sent behind the outstanding fetch: their answers follow its answer
	wakeNext  bool  // a wake came before the fetch was sent: the fetch goes without a long-poll
	noWake    bool  // the peer refused a wake (a release without ReplicaFetchWake)
	in        []byte
	wakeIn    []byte // the wakes' answers, read after the fetch's (whose records alias in)
}

// WakeFetch asks the leader to answer the outstanding ReplicaFetch now (cluster.FetchWaker).
func (p *peerConn) WakeFetch() bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.noWake {
		return false
	}
	if !p.fetching {
		p.wakeNext = true
		return true
	}
	p.corr++
	p.wakeOut = wire.AppendRequest(p.wakeOut[:0], p.corr, &wire.ReplicaFetchWakeRequest{ReplicaID: p.replicaID})
	if _, err := p.c.Write(p.wakeOut); err != nil {
		return false // the round's read fails too, or gets its answer: either way it ends
	}
	p.wakes++
	return true
}

// readWakes reads the answers of the wakes sent behind the round trip's request (corr),
// which the peer sends after that request's answer. A refusal (a peer without the API)
// makes later kicks cancel the round instead.
func (p *peerConn) readWakes(api wire.APIKey, corr uint32) error {
	p.wmu.Lock()
	n := p.wakes
	p.wakes, p.fetching = 0, false
	p.wmu.Unlock()
	for i := range n {
		h, _, buf, err := wire.ReadResponse(p.c, p.wakeIn, peerFrameBytesMax)
		p.wakeIn = buf
		if err != nil {
			return fmt.Errorf("read ReplicaFetchWake response: %w", err)
		}
		if want := corr + uint32(i) + 1; h.CorrelationID != want {
			return fmt.Errorf("ReplicaFetchWake response with correlation id %d, want %d (after %s)", h.CorrelationID, want, api)
		}
		if h.ErrorCode != wire.ErrNone {
			p.wmu.Lock()
			p.noWake = true
			p.wmu.Unlock()
		}
	}
	return nil
}

// peerError is a refusal a peer answered with: its code and message.
type peerError struct {
	code wire.ErrorCode
	msg  string
}

func (e *peerError) Error() string { return fmt.Sprintf("%s: %s", e.code.Name(), e.msg) }
func (e *peerError) Remote() bool  { return true }
func (e *peerError) Unwrap() error { return e.code }

// Is lets a caller test a peer's refusal against the controller's sentinel errors, whose
// text the peer's message carries.
func (e *peerError) Is(target error) bool {
	switch target {
	case controller.ErrStaleSession, controller.ErrTopicExists, controller.ErrNotEnoughBrokers, controller.ErrNotController,
		controller.ErrProducerFenced, controller.ErrInvalidProducerName, controller.ErrTooManyProducers:
		return strings.Contains(e.msg, target.Error())
	case controller.ErrUnsupportedProtocolVersion:
		return e.code == wire.ErrUnsupportedProtocolVersion
	case isr.ErrNotLeader:
		return e.code == wire.ErrNotLeaderOrWrongShard
	case isr.ErrOffsetOutOfRange:
		return e.code == wire.ErrOffsetOutOfRange
	}
	return false
}

func codeErr(code wire.ErrorCode, msg string) error {
	if code == wire.ErrNone {
		return nil
	}
	return &peerError{code: code, msg: msg}
}

func (p *peerConn) roundTrip(ctx context.Context, req, resp wire.Message) error {
	if dl, ok := ctx.Deadline(); ok {
		p.c.SetDeadline(dl)
	} else {
		p.c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { p.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	p.wmu.Lock()
	if fr, ok := req.(*wire.ReplicaFetchRequest); ok {
		if p.wakeNext { // kicked before it went out: do not park
			fr.MaxWaitMs, p.wakeNext = 0, false
		}
		p.fetching, p.replicaID = true, fr.ReplicaID
	}
	p.corr++
	corr := p.corr
	p.out = wire.AppendRequest(p.out[:0], corr, req)
	_, err := p.c.Write(p.out)
	p.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("send %s: %w", req.API(), err)
	}
	h, payload, buf, err := wire.ReadResponse(p.c, p.in, peerFrameBytesMax)
	p.in = buf
	if err != nil {
		return fmt.Errorf("read %s response: %w", req.API(), err)
	}
	if h.CorrelationID != corr {
		return fmt.Errorf("%s response with correlation id %d, want %d", req.API(), h.CorrelationID, corr)
	}
	if err := p.readWakes(req.API(), corr); err != nil {
		return err
	}
	if h.ErrorCode != wire.ErrNone {
		msg, _ := wire.DecodeErrorPayload(payload)
		return codeErr(h.ErrorCode, msg)
	}
	return resp.ReadFrom(payload)
}

func (p *peerConn) ReplicaFetch(ctx context.Context, req *cluster.FetchRequest) ([]cluster.FetchAnswer, error) {
	wr := &wire.ReplicaFetchRequest{ProtocolVersion: req.ProtocolVersion, ReplicaID: req.ReplicaID, MaxWaitMs: int32(req.MaxWait / time.Millisecond), MinBytes: 1, MaxBytes: req.BytesMax}
	index := map[string]int{}
	for _, fp := range req.Partitions {
		i, ok := index[fp.Topic]
		if !ok {
			i = len(wr.Topics)
			index[fp.Topic] = i
			wr.Topics = append(wr.Topics, wire.ReplicaFetchTopic{Topic: fp.Topic})
		}
		wr.Topics[i].Partitions = append(wr.Topics[i].Partitions, wire.ReplicaFetchPartition{
			Partition: fp.Partition, CurrentLeaderEpoch: fp.LeaderEpoch, FetchOffset: fp.Offset, MaxBytes: cmp.Or(fp.BytesMax, req.BytesMax)})
	}
	var resp wire.ReplicaFetchResponse
	if err := p.roundTrip(ctx, wr, &resp); err != nil {
		return nil, err
	}
	got := map[shard.TopicPartition]cluster.FetchAnswer{}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			tp := shard.TopicPartition{Topic: t.Topic, Partition: rp.Partition}
			// The records alias p.in, which the next round trip reuses: copy them.
			got[tp] = cluster.FetchAnswer{TopicPartition: tp, Err: codeErr(rp.ErrorCode, rp.ErrorMessage),
				HighWatermark: rp.HighWatermark, LogEndOffset: rp.LogEndOffset, Records: append([]byte(nil), rp.Records...)}
		}
	}
	out := make([]cluster.FetchAnswer, len(req.Partitions))
	for i, fp := range req.Partitions {
		a, ok := got[fp.TopicPartition]
		if !ok {
			a = cluster.FetchAnswer{TopicPartition: fp.TopicPartition, Err: fmt.Errorf("leader did not answer for %s/%d", fp.Topic, fp.Partition)}
		}
		out[i] = a
	}
	return out, nil
}

func (p *peerConn) OffsetsForLeaderEpoch(ctx context.Context, tp shard.TopicPartition, currentEpoch, epoch int32) (isr.EpochEndOffset, error) {
	none := isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}
	req := &wire.OffsetsForLeaderEpochRequest{Topics: []wire.OffsetsForLeaderEpochTopic{{Topic: tp.Topic,
		Partitions: []wire.OffsetsForLeaderEpochPartition{{Partition: tp.Partition, CurrentLeaderEpoch: currentEpoch, LeaderEpoch: epoch}}}}}
	var resp wire.OffsetsForLeaderEpochResponse
	if err := p.roundTrip(ctx, req, &resp); err != nil {
		return none, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return none, fmt.Errorf("OffsetsForLeaderEpoch: malformed answer for %s/%d", tp.Topic, tp.Partition)
	}
	a := resp.Topics[0].Partitions[0]
	if err := codeErr(a.ErrorCode, a.ErrorMessage); err != nil {
		return none, err
	}
	return isr.EpochEndOffset{Epoch: a.LeaderEpoch, EndOffset: a.EndOffset}, nil
}

func (p *peerConn) Controller(ctx context.Context, op int8, protocol uint16, body []byte) ([]byte, error) {
	var resp wire.ControllerResponse
	if err := p.roundTrip(ctx, &wire.ControllerRequest{Op: op, Body: body, ProtocolVersion: protocol}, &resp); err != nil {
		return nil, err
	}
	if err := codeErr(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return nil, err
	}
	return append([]byte(nil), resp.Body...), nil
}

func (p *peerConn) Close() error { return p.c.Close() }
