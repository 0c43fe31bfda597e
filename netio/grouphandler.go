package netio

import (
	"bytes"
	"fmt"
	"time"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/netio/wire"
)

// Group requests: each is translated into engine/group's request type and handed to the
// broker's group router (shard.Groups), which runs it on the coordinator shard's loop (a
// mailbox hop unless this connection is served by that shard). The answer comes back on
// that loop and is translated back. A JoinGroup's answer may come much later (when the
// join phase ends); nothing waits for it meanwhile.

// Byte fields of a decoded request alias its pooled frame buffer, which is reused once the
// request is answered; what the coordinator keeps (protocol metadata, assignments) is
// copied here.

// groupCodes maps the coordinator's (Kafka's) codes onto the ringlog wire codes.
var groupCodes = map[group.Code]wire.ErrorCode{
	group.CodeNone:                      wire.ErrNone,
	group.CodeUnknownServerError:        wire.ErrUnknown,
	group.CodeOffsetMetadataTooLarge:    wire.ErrOffsetMetadataTooLarge,
	group.CodeCoordinatorLoadInProgress: wire.ErrCoordinatorLoadInProgress,
	group.CodeCoordinatorNotAvailable:   wire.ErrCoordinatorNotAvailable,
	group.CodeNotCoordinator:            wire.ErrNotCoordinator,
	group.CodeIllegalGeneration:         wire.ErrIllegalGeneration,
	group.CodeInconsistentGroupProtocol: wire.ErrInconsistentGroupProtocol,
	group.CodeInvalidGroupID:            wire.ErrInvalidGroupID,
	group.CodeUnknownMemberID:           wire.ErrUnknownMemberID,
	group.CodeInvalidSessionTimeout:     wire.ErrInvalidSessionTimeout,
	group.CodeRebalanceInProgress:       wire.ErrRebalanceInProgress,
	group.CodeInvalidCommitOffsetSize:   wire.ErrInvalidCommitOffsetSize,
	group.CodeNonEmptyGroup:             wire.ErrNonEmptyGroup,
	group.CodeGroupIDNotFound:           wire.ErrGroupIDNotFound,
	group.CodeGroupMaxSizeReached:       wire.ErrGroupMaxSizeReached,
	group.CodeFencedInstanceID:          wire.ErrFencedInstanceID,
	group.CodeMemberIDRequired:          wire.ErrMemberIDRequired,
}

func groupCode(c group.Code) wire.ErrorCode {
	if w, ok := groupCodes[c]; ok {
		return w
	}
	return wire.ErrUnknown
}

// groupMessage is the message of a response carrying c: empty on success, else the
// coordinator's name of the code (the wire code's own message says the rest).
func groupMessage(c group.Code) string {
	if c == group.CodeNone {
		return ""
	}
	return c.String()
}

func msToDuration(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

func durationToMs(d time.Duration) int32 { return int32(min(d.Milliseconds(), 1<<31-1)) }

// serveGroup dispatches one group request; it reports false for other requests.
func (h *BrokerHandler) serveGroup(req *Request) bool {
	groups := h.b.Groups()
	call := func(r group.Request, reply func(group.Response) wire.Message) {
		groups.Do(caller(req), r, func(resp group.Response) { req.ReplyMessage(reply(resp)) })
	}
	switch body := req.Body.(type) {
	case *wire.FindCoordinatorRequest:
		req.ReplyMessage(h.findCoordinator(body))
	case *wire.JoinGroupRequest:
		call(joinRequest(body, req.Conn.RemoteAddr), joinResponse)
	case *wire.SyncGroupRequest:
		call(syncRequest(body), func(r group.Response) wire.Message {
			s := r.(group.SyncGroupResponse)
			return &wire.SyncGroupResponse{ErrorCode: groupCode(s.Err), ErrorMessage: groupMessage(s.Err), ProtocolType: s.ProtocolType, Protocol: s.Protocol, Assignment: s.Assignment}
		})
	case *wire.HeartbeatRequest:
		call(group.Heartbeat{Group: body.Group, MemberID: body.MemberID, InstanceID: body.InstanceID, Generation: body.Generation}, func(r group.Response) wire.Message {
			c := r.(group.HeartbeatResponse).Err
			return &wire.HeartbeatResponse{ErrorCode: groupCode(c), ErrorMessage: groupMessage(c)}
		})
	case *wire.LeaveGroupRequest:
		lg := group.LeaveGroup{Group: body.Group}
		for _, m := range body.Members {
			lg.Members = append(lg.Members, group.LeavingMember{MemberID: m.MemberID, InstanceID: m.InstanceID})
		}
		call(lg, leaveResponse)
	case *wire.OffsetCommitRequest:
		call(commitRequest(body), commitResponse)
	case *wire.OffsetFetchRequest:
		of := group.OffsetFetch{Group: body.Group}
		for _, t := range body.Topics {
			for _, p := range t.Partitions {
				of.Partitions = append(of.Partitions, group.TopicPartition{Topic: t.Topic, Partition: p})
			}
		}
		if body.Topics != nil && of.Partitions == nil {
			of.Partitions = []group.TopicPartition{} // named no partition: none, not all
		}
		call(of, fetchOffsetsResponse)
	case *wire.ListGroupsRequest:
		lg := group.ListGroups{}
		for _, name := range body.States {
			s, ok := group.ParseState(name)
			if !ok {
				req.ReplyError(wire.ErrInvalidRequest, fmt.Sprintf("ListGroups: unknown state %q", name))
				return true
			}
			lg.States = append(lg.States, s)
		}
		call(lg, func(r group.Response) wire.Message {
			l := r.(group.ListGroupsResponse)
			out := &wire.ListGroupsResponse{ErrorCode: groupCode(l.Err), ErrorMessage: groupMessage(l.Err)}
			for _, g := range l.Groups {
				out.Groups = append(out.Groups, wire.ListedGroup{Group: g.Group, ProtocolType: g.ProtocolType, State: g.State.String()})
			}
			return out
		})
	case *wire.DescribeGroupsRequest:
		call(group.DescribeGroups{Groups: body.Groups}, describeResponse)
	case *wire.DeleteGroupsRequest:
		call(group.DeleteGroups{Groups: body.Groups}, func(r group.Response) wire.Message {
			out := &wire.DeleteGroupsResponse{}
			for _, d := range r.(group.DeleteGroupsResponse).Results {
				out.Groups = append(out.Groups, wire.GroupResult{Group: d.Group, ErrorCode: groupCode(d.Err), ErrorMessage: groupMessage(d.Err)})
			}
			return out
		})
	default:
		return false
	}
	return true
}

func (h *BrokerHandler) findCoordinator(body *wire.FindCoordinatorRequest) *wire.FindCoordinatorResponse {
	if h.cluster != nil && body.Group != "" {
		// On a cluster the coordinator is the leader of the group's __consumer_offsets
		// partition, at its client address (its shard is that broker's business).
		b, err := h.cluster.GroupCoordinator(body.Group)
		if err != nil {
			return &wire.FindCoordinatorResponse{ErrorCode: wire.ErrCoordinatorNotAvailable, ErrorMessage: err.Error(), Shard: -1}
		}
		if b.ID != h.brokerID {
			return &wire.FindCoordinatorResponse{Shard: -1, Address: b.Address}
		}
	}
	si, code := h.b.Groups().CoordinatorShard(body.Group)
	if code != group.CodeNone {
		return &wire.FindCoordinatorResponse{ErrorCode: groupCode(code), ErrorMessage: groupMessage(code), Shard: -1}
	}
	addr := h.address
	if si < len(h.shardAddrs) {
		addr = h.shardAddrs[si]
	}
	return &wire.FindCoordinatorResponse{Shard: int32(si), Address: addr}
}

func joinRequest(body *wire.JoinGroupRequest, remote string) group.JoinGroup {
	j := group.JoinGroup{Group: body.Group, MemberID: body.MemberID, InstanceID: body.InstanceID, ClientID: body.ClientID, ClientHost: remote,
		SessionTimeout: msToDuration(body.SessionTimeoutMs), RebalanceTimeout: msToDuration(body.RebalanceTimeoutMs),
		ProtocolType: body.ProtocolType, RequireKnownMemberID: body.Version >= 1}
	for _, p := range body.Protocols {
		j.Protocols = append(j.Protocols, group.Protocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
	}
	return j
}

func joinResponse(r group.Response) wire.Message {
	j := r.(group.JoinGroupResponse)
	out := &wire.JoinGroupResponse{ErrorCode: groupCode(j.Err), ErrorMessage: groupMessage(j.Err), Generation: j.Generation,
		ProtocolType: j.ProtocolType, Protocol: j.Protocol, Leader: j.Leader, MemberID: j.MemberID}
	for _, m := range j.Members {
		out.Members = append(out.Members, wire.JoinGroupMember{MemberID: m.MemberID, InstanceID: m.InstanceID, Metadata: m.Metadata})
	}
	return out
}

func syncRequest(body *wire.SyncGroupRequest) group.SyncGroup {
	s := group.SyncGroup{Group: body.Group, MemberID: body.MemberID, InstanceID: body.InstanceID, Generation: body.Generation,
		ProtocolType: body.ProtocolType, Protocol: body.Protocol}
	for _, a := range body.Assignments {
		s.Assignments = append(s.Assignments, group.MemberAssignment{MemberID: a.MemberID, Assignment: bytes.Clone(a.Assignment)})
	}
	return s
}

func leaveResponse(r group.Response) wire.Message {
	l := r.(group.LeaveGroupResponse)
	out := &wire.LeaveGroupResponse{ErrorCode: groupCode(l.Err), ErrorMessage: groupMessage(l.Err)}
	for _, m := range l.Members {
		out.Members = append(out.Members, wire.LeaveGroupResult{MemberID: m.MemberID, InstanceID: m.InstanceID, ErrorCode: groupCode(m.Err)})
	}
	return out
}

func commitRequest(body *wire.OffsetCommitRequest) group.OffsetCommit {
	c := group.OffsetCommit{Group: body.Group, MemberID: body.MemberID, InstanceID: body.InstanceID, Generation: body.Generation}
	for _, t := range body.Topics {
		for _, p := range t.Partitions {
			c.Offsets = append(c.Offsets, group.CommitOffset{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata})
		}
	}
	return c
}

func commitResponse(r group.Response) wire.Message {
	out := &wire.OffsetCommitResponse{}
	for _, p := range r.(group.OffsetCommitResponse).Partitions {
		if n := len(out.Topics); n == 0 || out.Topics[n-1].Topic != p.Topic {
			out.Topics = append(out.Topics, wire.OffsetCommitResponseTopic{Topic: p.Topic})
		}
		t := &out.Topics[len(out.Topics)-1]
		t.Partitions = append(t.Partitions, wire.PartitionError{Partition: p.Partition, ErrorCode: groupCode(p.Err)})
	}
	return out
}

func fetchOffsetsResponse(r group.Response) wire.Message {
	f := r.(group.OffsetFetchResponse)
	out := &wire.OffsetFetchResponse{ErrorCode: groupCode(f.Err), ErrorMessage: groupMessage(f.Err)}
	for _, p := range f.Partitions {
		if n := len(out.Topics); n == 0 || out.Topics[n-1].Topic != p.Topic {
			out.Topics = append(out.Topics, wire.OffsetFetchResponseTopic{Topic: p.Topic})
		}
		t := &out.Topics[len(out.Topics)-1]
		t.Partitions = append(t.Partitions, wire.OffsetFetchPartition{Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata})
	}
	return out
}

func describeResponse(r group.Response) wire.Message {
	out := &wire.DescribeGroupsResponse{}
	for _, g := range r.(group.DescribeGroupsResponse).Groups {
		dg := wire.DescribedGroup{ErrorCode: groupCode(g.Err), ErrorMessage: groupMessage(g.Err), Group: g.Group, State: g.State.String(),
			ProtocolType: g.ProtocolType, Protocol: g.Protocol, Generation: g.Generation, Leader: g.Leader}
		for _, m := range g.Members {
			dg.Members = append(dg.Members, wire.DescribedMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID,
				ClientHost: m.ClientHost, SessionTimeoutMs: durationToMs(m.SessionTimeout), RebalanceTimeoutMs: durationToMs(m.RebalanceTimeout),
				Metadata: m.Metadata, Assignment: m.Assignment})
		}
		out.Groups = append(out.Groups, dg)
	}
	return out
}
