package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// More of the adversarial suite (adversarial_test.go): the consumer-group APIs on the
// ringlog listener, and the Kafka listener, which shares the broker's limits.

// Every group API that takes a list, with an entry repeated and with more entries than
// --max-request-entries: refused (INVALID_REQUEST) before any work, the connection keeps
// working.
func TestAdversarialGroupCounts(t *testing.T) {
	names := func(n int, repeat bool) []string {
		out := make([]string, n)
		for i := range out {
			if out[i] = fmt.Sprintf("g-%d", i); repeat {
				out[i] = "g"
			}
		}
		return out
	}
	expectEntriesRefused(t, []entriesCase{
		{"offset commit", true, func(n int, repeat bool) wire.Message {
			parts := make([]wire.OffsetCommitPartition, n)
			for i := range parts {
				if parts[i] = (wire.OffsetCommitPartition{Partition: int32(i), Offset: 1, LeaderEpoch: -1}); repeat {
					parts[i].Partition = 0
				}
			}
			return &wire.OffsetCommitRequest{Group: "g", Generation: -1, Topics: []wire.OffsetCommitTopic{{Topic: "t", Partitions: parts}}}
		}},
		{"offset fetch", true, func(n int, repeat bool) wire.Message {
			parts := make([]int32, n)
			for i := range parts {
				if !repeat {
					parts[i] = int32(i)
				}
			}
			return &wire.OffsetFetchRequest{Group: "g", Topics: []wire.OffsetFetchTopic{{Topic: "t", Partitions: parts}}}
		}},
		{"describe groups", true, func(n int, repeat bool) wire.Message {
			return &wire.DescribeGroupsRequest{Groups: names(n, repeat)}
		}},
		{"delete groups", true, func(n int, repeat bool) wire.Message {
			return &wire.DeleteGroupsRequest{Groups: names(n, repeat)}
		}},
		{"join group", false, func(n int, _ bool) wire.Message {
			protocols := make([]wire.GroupProtocol, n)
			for i := range protocols {
				protocols[i] = wire.GroupProtocol{Name: fmt.Sprintf("p-%d", i)}
			}
			return &wire.JoinGroupRequest{Group: "g", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000, ProtocolType: "consumer", Protocols: protocols}
		}},
		{"sync group", false, func(n int, _ bool) wire.Message {
			assignments := make([]wire.SyncGroupAssignment, n)
			for i := range assignments {
				assignments[i] = wire.SyncGroupAssignment{MemberID: fmt.Sprintf("m-%d", i)}
			}
			return &wire.SyncGroupRequest{Group: "g", MemberID: "m-0", Generation: 1, Assignments: assignments}
		}},
		{"leave group", false, func(n int, _ bool) wire.Message {
			members := make([]wire.GroupMemberRef, n)
			for i := range members {
				members[i] = wire.GroupMemberRef{MemberID: fmt.Sprintf("m-%d", i)}
			}
			return &wire.LeaveGroupRequest{Group: "g", Members: members}
		}},
	})
}

// groupMetadataAttack is how a client makes a coordinator keep bytes: each JoinGroup
// creates a group whose one member carries a protocol's metadata, kept until the leader's
// SyncGroup is overdue (its rebalance timeout, which the member chooses) and then for its
// session (30 minutes at most).
const (
	groupAttackJoinsLong     = 800 // RINGLOG_E2E_LONG; the default run's 200 already pass the bound
	groupAttackJoins         = 200
	groupAttackMetadataBytes = 1000 << 10 // under the Kafka listener's 1 MiB frame
)

// groupStateBytes is the --group-max-state-bytes of the group attacks: two shards' worth
// stays well under the suite's resident memory cap.
const groupStateBytes = 32 << 20

// A JoinGroup's protocol metadata stays in the coordinator as long as the member's session:
// 800 joins (200 in the default run) of one new group each, with ~1 MB of metadata, asked
// the broker to keep 800 MB (at 81782b4 it kept all of them on either listener: peak RSS 814
// and 816 MiB). On both
// listeners, the coordinator keeps at most --group-max-state-bytes per shard and refuses the
// joins past it (COORDINATOR_NOT_AVAILABLE, retriable), and the broker stays up and fast.
func TestAdversarialGroupMetadataRetained(t *testing.T) {
	for _, listener := range []string{"ringlog", "kafka"} {
		t.Run(listener, func(t *testing.T) {
			kafkaAddr := freeAddr(t)
			b := startCapped(t, 1024, "--kafka-listen", kafkaAddr, "--group-max-state-bytes", strconv.Itoa(groupStateBytes))
			pr := newProbe(t, b)
			metadata := bytes.Repeat([]byte("m"), groupAttackMetadataBytes)
			refused := 0
			var join func(i int) (refusedCode bool)
			switch listener {
			case "ringlog":
				r := mustDialFrom(t, attacker, b.addr)
				join = func(i int) bool {
					req := &wire.JoinGroupRequest{Group: fmt.Sprintf("hog-%d", i), SessionTimeoutMs: 30 * 60 * 1000, RebalanceTimeoutMs: 30 * 60 * 1000,
						ProtocolType: "consumer", Protocols: []wire.GroupProtocol{{Name: "range", Metadata: metadata}}}
					r.write(wire.AppendRequest(nil, uint32(i), req))
					h, payload := r.readResponse()
					var resp wire.JoinGroupResponse
					if h.ErrorCode != wire.ErrNone || resp.ReadFrom(payload) != nil {
						t.Fatalf("join %d: frame error %s", i, h.ErrorCode.Name())
					}
					if resp.ErrorCode != wire.ErrNone && resp.ErrorCode != wire.ErrCoordinatorNotAvailable {
						t.Fatalf("join %d: %s %s", i, resp.ErrorCode.Name(), resp.ErrorMessage)
					}
					return resp.ErrorCode == wire.ErrCoordinatorNotAvailable
				}
			case "kafka":
				k := dialKafka(t, attacker, kafkaAddr)
				join = func(i int) bool {
					req := kmsg.NewPtrJoinGroupRequest()
					req.Version = 3 // before KIP-394: the member joins at once
					req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis, req.ProtocolType = fmt.Sprintf("hog-%d", i), 30*60*1000, 30*60*1000, "consumer"
					proto := kmsg.NewJoinGroupRequestProtocol()
					proto.Name, proto.Metadata = "range", metadata
					req.Protocols = append(req.Protocols, proto)
					resp := k.roundTrip(req).(*kmsg.JoinGroupResponse)
					const coordinatorNotAvailable = 15
					if resp.ErrorCode != 0 && resp.ErrorCode != coordinatorNotAvailable {
						t.Fatalf("join %d: error code %d", i, resp.ErrorCode)
					}
					return resp.ErrorCode == coordinatorNotAvailable
				}
			}
			joins := groupAttackJoins
			if long() {
				joins = groupAttackJoinsLong
			}
			for i := range joins {
				if join(i) {
					refused++
				}
				if !b.running() {
					t.Fatalf("broker died after %d joins of %d KiB: %v\n%s", i+1, groupAttackMetadataBytes>>10, b.err, b.logText())
				}
			}
			t.Logf("%d of %d joins refused", refused, joins)
			if refused == 0 {
				t.Errorf("the coordinators kept all %d joins of %d KiB", joins, groupAttackMetadataBytes>>10)
			}
			pr.expectFast("with the coordinators full of members")
			expectSurvived(t, b, probeTopic)
		})
	}
}

// Committed offsets stay for the offsets' retention (7 days), each with up to 4 KiB of
// metadata: 60 OffsetCommits, each to a new group, of 1,000 partitions with 1 KiB of
// metadata ask the coordinators to keep 60 MB (the limits allow 40 MB a commit; 81782b4
// bounded none of it). Past --group-max-state-bytes commits are refused whole
// (COORDINATOR_NOT_AVAILABLE). (Commits of 9,000 such offsets, 9 MB frames, got no answer
// within 20 s on 81782b4 and here alike, shards idle: not explained yet.)
func TestAdversarialOffsetsRetained(t *testing.T) {
	b := startCapped(t, 1024, "--group-max-state-bytes", strconv.Itoa(groupStateBytes), "--frame-timeout", "30s")
	pr := newProbe(t, b)
	r := mustDialFrom(t, attacker, b.addr)
	metadata := string(bytes.Repeat([]byte("o"), 1024))
	parts := make([]wire.OffsetCommitPartition, 1000)
	for i := range parts {
		parts[i] = wire.OffsetCommitPartition{Partition: int32(i), Offset: 1, LeaderEpoch: -1, Metadata: metadata}
	}
	refused := 0
	const commits = 60
	for i := range uint32(commits) {
		req := &wire.OffsetCommitRequest{Group: fmt.Sprintf("hoard-%d", i), Generation: -1, Topics: []wire.OffsetCommitTopic{{Topic: "any", Partitions: parts}}}
		r.write(wire.AppendRequest(nil, i, req))
		h, payload := r.readResponse()
		var resp wire.OffsetCommitResponse
		if h.ErrorCode != wire.ErrNone || resp.ReadFrom(payload) != nil || len(resp.Topics) != 1 {
			t.Fatalf("commit %d: frame error %s", i, h.ErrorCode.Name())
		}
		switch code := resp.Topics[0].Partitions[0].ErrorCode; code {
		case wire.ErrNone:
		case wire.ErrCoordinatorNotAvailable:
			refused++
		default:
			t.Fatalf("commit %d: %s", i, code.Name())
		}
		if !b.running() {
			t.Fatalf("broker died after %d commits: %v\n%s", i+1, b.err, b.logText())
		}
	}
	t.Logf("%d of %d commits of 1,000 offsets with 1 KiB of metadata refused", refused, commits)
	if refused == 0 {
		t.Errorf("the coordinators kept all %d commits", commits)
	}
	pr.expectFast("with the coordinators full of offsets")
	expectSurvived(t, b, probeTopic)
}

// The Kafka listener does not refuse a repeated partition (Kafka does not), so a Fetch or
// ListOffsets naming one partition up to --max-request-entries times must stay bounded by
// the response byte cap, the descriptor quotas and the entry count.
func TestAdversarialKafkaRepeatedPartition(t *testing.T) {
	for _, storage := range []string{"page-cache", "direct"} {
		t.Run("storage="+storage, func(t *testing.T) {
			const fetchBytesMax = 8 << 20
			kafkaAddr := freeAddr(t)
			b := startCapped(t, 1024, "--kafka-listen", kafkaAddr, "--storage", storage, "--max-fetch-bytes", strconv.Itoa(fetchBytesMax))
			fill(t, b, "rep", 1, 2<<20, 4<<10)
			pr := newProbe(t, b)
			before := procStatusBytes(t, b, "VmRSS")
			k := dialKafka(t, attacker, kafkaAddr)
			const n = 9000 // under the default --max-request-entries (10,000)
			fetch := kmsg.NewPtrFetchRequest()
			fetch.Version, fetch.ReplicaID, fetch.MaxBytes, fetch.MaxWaitMillis = 11, -1, 1<<31-1, 0
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "rep"
			for range n {
				p := kmsg.NewFetchRequestTopicPartition()
				p.Partition, p.PartitionMaxBytes, p.CurrentLeaderEpoch = 0, 1<<31-1, -1
				ft.Partitions = append(ft.Partitions, p)
			}
			fetch.Topics = append(fetch.Topics, ft)
			for i := range 4 {
				frameBytes := k.send(fetch)
				resp, size := k.receive(fetch)
				records := 0
				for _, rt := range resp.(*kmsg.FetchResponse).Topics {
					for _, rp := range rt.Partitions {
						records += len(rp.RecordBatches)
					}
				}
				t.Logf("fetch %d (%d-byte request): %d-byte response, %d record bytes", i, frameBytes, size, records)
				if records > fetchBytesMax+64<<10 {
					t.Errorf("a fetch naming one partition %d times returned %d record bytes, cap %d", n, records, fetchBytesMax)
				}
			}
			list := kmsg.NewPtrListOffsetsRequest()
			list.Version, list.ReplicaID = 4, -1
			lt := kmsg.NewListOffsetsRequestTopic()
			lt.Topic = "rep"
			for range n {
				p := kmsg.NewListOffsetsRequestTopicPartition()
				p.Partition, p.Timestamp, p.CurrentLeaderEpoch = 0, 0, -1 // by time: a time-index search each
				lt.Partitions = append(lt.Partitions, p)
			}
			list.Topics = append(list.Topics, lt)
			k.send(list)
			if _, size := k.receive(list); size > n*64 {
				t.Errorf("list offsets response of %d bytes", size)
			}
			if grown := procStatusBytes(t, b, "VmHWM") - before; grown > 256<<20 {
				t.Errorf("repeated-partition requests grew the broker by %d MiB", grown>>20)
			}
			pr.expectFast("after repeated-partition Kafka requests")
			expectSurvived(t, b, "rep")
		})
	}
}

// The Kafka listener answered a name as often as a request repeated it: a 45 KB Metadata
// request naming one 500-partition topic 9,000 times asked for 4.5 million partition
// answers (at 81782b4: "fatal error: out of memory" under the suite's address-space cap),
// and a DescribeGroups naming one group with ~1 MB of member metadata 9,000 times for a
// 9 GB response. Metadata and DescribeGroups answer each name once (Kafka's broker does the
// same for Metadata).
func TestAdversarialKafkaRepeatedNames(t *testing.T) {
	kafkaAddr := freeAddr(t)
	b := startCapped(t, 4096, "--kafka-listen", kafkaAddr)
	const partitions = 500
	ctx := testContext(t, 2*time.Minute)
	if err := b.client(t).CreateTopic(ctx, "wide", partitions, nil); err != nil {
		t.Fatal(err)
	}
	pr := newProbe(t, b)
	k := dialKafka(t, attacker, kafkaAddr)
	const n = 9000
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 7
	for range n {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("wide")
		md.Topics = append(md.Topics, rt)
	}
	k.send(md)
	resp, size := k.receive(md)
	t.Logf("metadata naming a %d-partition topic %d times: %d topics, %d bytes", partitions, n, len(resp.(*kmsg.MetadataResponse).Topics), size)
	if size > 1<<20 {
		t.Errorf("metadata response of %d bytes", size)
	}

	// A Stable group whose one member keeps ~1 MB of metadata, described 9,000 times.
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = 3, "big", 60000, 10000, "consumer"
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "range", bytes.Repeat([]byte("m"), groupAttackMetadataBytes)
	join.Protocols = append(join.Protocols, proto)
	joined := k.roundTrip(join).(*kmsg.JoinGroupResponse)
	if joined.ErrorCode != 0 {
		t.Fatalf("join: error code %d", joined.ErrorCode)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version, sync.Group, sync.Generation, sync.MemberID = 1, "big", joined.Generation, joined.MemberID
	assignment := kmsg.NewSyncGroupRequestGroupAssignment()
	assignment.MemberID, assignment.MemberAssignment = joined.MemberID, []byte{0, 0}
	sync.GroupAssignment = append(sync.GroupAssignment, assignment)
	if synced := k.roundTrip(sync).(*kmsg.SyncGroupResponse); synced.ErrorCode != 0 {
		t.Fatalf("sync: error code %d", synced.ErrorCode)
	}
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Version = 1
	for range n {
		describe.Groups = append(describe.Groups, "big")
	}
	k.send(describe)
	resp, size = k.receive(describe)
	t.Logf("describe groups naming a group of %d KiB %d times: %d groups, %d bytes", groupAttackMetadataBytes>>10, n, len(resp.(*kmsg.DescribeGroupsResponse).Groups), size)
	if size > 4<<20 {
		t.Errorf("describe groups response of %d bytes", size)
	}
	pr.expectFast("after repeated names on the Kafka listener")
	expectSurvived(t, b, probeTopic)
}

// Never-reading fetchers on the Kafka listener: connections pipeline fetches of every
// partition and never read. The unsent responses hold segment descriptors and bytes, both
// bounded per connection, per address and per broker as on the ringlog listener.
func TestAdversarialKafkaFetchNeverRead(t *testing.T) {
	kafkaAddr := freeAddr(t)
	b := startCapped(t, 1024, "--kafka-listen", kafkaAddr)
	const partitions = 32
	fill(t, b, "many", partitions, 64<<10, 8<<10)
	pr := newProbe(t, b)
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.ReplicaID, fetch.MaxBytes = 11, -1, 64<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "many"
	for i := range partitions {
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition, p.PartitionMaxBytes, p.CurrentLeaderEpoch = int32(i), 1<<20, -1
		ft.Partitions = append(ft.Partitions, p)
	}
	fetch.Topics = append(fetch.Topics, ft)
	var chunk []byte
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("hostile"))
	for i := range 64 {
		chunk = formatter.AppendRequest(chunk, fetch, int32(i))
	}
	conns := 16
	if long() {
		conns = 64
	}
	done := make(chan struct{}, conns)
	for range conns {
		d := net.Dialer{Timeout: rawTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(attacker)}}
		c, err := d.Dial("tcp", kafkaAddr)
		if err != nil {
			done <- struct{}{}
			continue
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			defer func() { done <- struct{}{} }()
			c.SetWriteDeadline(time.Now().Add(3 * time.Second))
			for range 40 {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
	for range conns {
		<-done
	}
	if !b.running() {
		t.Fatalf("broker died under never-reading Kafka fetchers: %v\n%s", b.err, b.logText())
	}
	if fds := brokerFDs(t, b); fds > 1024-64 {
		t.Errorf("broker holds %d descriptors under a limit of 1024", fds)
	} else {
		t.Logf("broker holds %d descriptors while %d Kafka connections leave fetches unread", fds, conns)
	}
	pr.expectFast("while Kafka fetchers hold responses unread")
	expectSurvived(t, b, "many")
}

// The Kafka listener counts its connections against the same per-address limit.
func TestAdversarialKafkaConnectionsPerAddress(t *testing.T) {
	const perAddress = 16
	kafkaAddr := freeAddr(t)
	b := startCapped(t, 1024, "--kafka-listen", kafkaAddr, "--max-connections-per-address", strconv.Itoa(perAddress))
	var conns []net.Conn
	for range 3 * perAddress {
		d := net.Dialer{Timeout: rawTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(attacker)}}
		c, err := d.Dial("tcp", kafkaAddr)
		if err != nil {
			continue
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	// Admitted connections answer ApiVersions; the rest were closed at accept.
	open := 0
	for i, c := range conns {
		k := &kafkaConn{t: t, conn: c, corr: int32(i)}
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 0
		if _, err := k.trySend(req); err != nil {
			continue
		}
		if _, _, err := k.tryReceive(req); err == nil {
			open++
		}
	}
	expectAddressLimitHeld(t, b, "Kafka ", "answered", open, len(conns), perAddress)
}

// kafkaConn is a raw Kafka protocol connection: kmsg encodes, nothing checks.
type kafkaConn struct {
	t    *testing.T
	conn net.Conn
	corr int32
}

func dialKafka(t *testing.T, local, addr string) *kafkaConn {
	t.Helper()
	d := net.Dialer{Timeout: rawTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial Kafka listener %s from %s: %v", addr, local, err)
	}
	t.Cleanup(func() { c.Close() })
	return &kafkaConn{t: t, conn: c}
}

func (k *kafkaConn) trySend(req kmsg.Request) (int, error) {
	k.corr++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("hostile")).AppendRequest(nil, req, k.corr)
	k.conn.SetWriteDeadline(time.Now().Add(rawTimeout))
	_, err := k.conn.Write(frame)
	return len(frame), err
}

func (k *kafkaConn) send(req kmsg.Request) int {
	k.t.Helper()
	n, err := k.trySend(req)
	if err != nil {
		k.t.Fatalf("send %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return n
}

// tryReceive reads the response to req, the last request sent, and its frame size.
func (k *kafkaConn) tryReceive(req kmsg.Request) (kmsg.Response, int, error) {
	k.conn.SetReadDeadline(time.Now().Add(rawTimeout))
	var size [4]byte
	if _, err := io.ReadFull(k.conn, size[:]); err != nil {
		return nil, 0, err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > 256<<20 {
		return nil, 0, fmt.Errorf("response frame of %d bytes", n)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(k.conn, frame); err != nil {
		return nil, 0, err
	}
	if corr := int32(binary.BigEndian.Uint32(frame)); corr != k.corr {
		return nil, 0, fmt.Errorf("correlation id %d, want %d", corr, k.corr)
	}
	body := frame[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != 18 { // ApiVersions' response header is never flexible
		if len(body) == 0 || body[0] != 0 {
			return nil, 0, errors.New("response header with tagged fields")
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, 0, fmt.Errorf("decode %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	return resp, n, nil
}

func (k *kafkaConn) receive(req kmsg.Request) (kmsg.Response, int) {
	k.t.Helper()
	resp, n, err := k.tryReceive(req)
	if err != nil {
		k.t.Fatalf("receive %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp, n
}

func (k *kafkaConn) roundTrip(req kmsg.Request) kmsg.Response {
	k.t.Helper()
	k.send(req)
	resp, _ := k.receive(req)
	return resp
}
