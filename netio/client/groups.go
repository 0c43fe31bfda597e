package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
)

// Group admin calls and the coordinator lookup shared with GroupConsumer. A group's
// requests go to its coordinator's address (FindCoordinator, cached per group); a
// coordinator error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken connection)
// drops the cached address so the next call looks it up again.

// A group call retries after coordinator errors until its pauses add up to
// coordinatorRetryTime (or its context ends), at most coordinatorRetryMax attempts; the
// pauses double from coordinatorRetryBackoff up to coordinatorRetryBackoffMax, with jitter
// (BackoffDelay). The time covers a coordinator failover on a cluster (the dead broker's
// session timeout, 6 s by default, then the new leader loading the group's partition), as
// Kafka's clients retry until their API timeout; 8 attempts (about 6 s) gave up first.
const (
	coordinatorRetryMax        = 64
	coordinatorRetryTime       = 30 * time.Second
	coordinatorRetryBackoff    = 100 * time.Millisecond
	coordinatorRetryBackoffMax = 1600 * time.Millisecond
)

// coordinatorAddr returns the address of groupID's coordinator.
func (c *Client) coordinatorAddr(ctx context.Context, groupID string) (string, error) {
	c.mu.Lock()
	addr, ok := c.coordinators[groupID]
	c.mu.Unlock()
	if ok {
		return addr, nil
	}
	var resp wire.FindCoordinatorResponse
	if err := c.callHome(ctx, &wire.FindCoordinatorRequest{Group: groupID}, &resp); err != nil {
		return "", fmt.Errorf("find coordinator of %s: %w", groupID, err)
	}
	if resp.ErrorCode != wire.ErrNone {
		return "", fmt.Errorf("find coordinator of %s: %w", groupID, wire.CodeError(resp.ErrorCode, resp.ErrorMessage))
	}
	addr = resp.Address
	if addr == "" || c.cfg.DisableShardRouting {
		addr = c.BrokerAddr()
	}
	c.mu.Lock()
	if len(c.coordinators) >= coordinatorsCachedMax {
		clear(c.coordinators)
	}
	c.coordinators[groupID] = addr
	c.mu.Unlock()
	return addr, nil
}

// coordinatorsCachedMax bounds the coordinator cache (cleared whole when full).
const coordinatorsCachedMax = 4096

func (c *Client) forgetCoordinator(groupID string) {
	c.mu.Lock()
	delete(c.coordinators, groupID)
	c.mu.Unlock()
}

// coordinatorError reports whether err (or code) means: find the coordinator again and
// retry.
func coordinatorError(err error, code wire.ErrorCode) bool {
	switch code {
	case wire.ErrNotCoordinator, wire.ErrCoordinatorNotAvailable, wire.ErrCoordinatorLoadInProgress, wire.ErrShuttingDown, wire.ErrThrottled:
		return true
	}
	return err != nil && (errors.Is(err, ErrConnClosed) || errors.Is(err, wire.ErrNotCoordinator) ||
		errors.Is(err, wire.ErrCoordinatorNotAvailable) || errors.Is(err, wire.ErrCoordinatorLoadInProgress))
}

// groupCall sends req to groupID's coordinator, retrying after coordinator errors;
// codeOf extracts the response's top-level code (ErrNone when it has none).
func (c *Client) groupCall(ctx context.Context, groupID string, req, resp wire.Message, codeOf func() wire.ErrorCode) error {
	var err error
	var paused time.Duration
	for attempt := 0; attempt < coordinatorRetryMax && paused < coordinatorRetryTime; attempt++ {
		if attempt > 0 {
			d := BackoffDelay(coordinatorRetryBackoff, coordinatorRetryBackoffMax, attempt-1, c.jitter())
			paused += d
			if c.sleep(ctx, d) != nil {
				return fmt.Errorf("%s for group %s: %w (after %v)", req.API(), groupID, ctx.Err(), err)
			}
		}
		var addr string
		if addr, err = c.coordinatorAddr(ctx, groupID); err != nil {
			if coordinatorError(err, wire.ErrNone) {
				continue
			}
			return err
		}
		err = c.Call(ctx, addr, req, resp)
		code := wire.ErrNone
		if err == nil {
			code = codeOf()
		}
		if !coordinatorError(err, code) {
			return err
		}
		c.forgetCoordinator(groupID)
		if err == nil {
			err = code
		}
	}
	return fmt.Errorf("%s for group %s: %w", req.API(), groupID, err)
}

// GroupListing is one group as ListGroups reports it.
type GroupListing struct {
	Group        string
	ProtocolType string
	State        string
}

// ListGroups lists the groups, sorted by id; states filters by state name (Empty,
// PreparingRebalance, CompletingRebalance, Stable). A broker lists the groups it
// coordinates, so on a cluster (metadata listed its brokers) every broker is asked and the
// lists merged, as Kafka's admin client does; a broker that cannot be reached is skipped
// (a dead coordinator's groups have no coordinator until a new one loads them). Otherwise
// the home broker answers.
func (c *Client) ListGroups(ctx context.Context, states ...string) ([]GroupListing, error) {
	brokers := c.Brokers()
	if len(brokers) == 0 {
		// Not known yet: metadata of no topic names a cluster's brokers (none: one broker).
		if _, err := c.refreshMetadata(ctx, []string{}); err == nil {
			brokers = c.Brokers()
		}
	}
	if len(brokers) == 0 {
		var resp wire.ListGroupsResponse
		if err := c.callHome(ctx, &wire.ListGroupsRequest{States: states}, &resp); err != nil {
			return nil, fmt.Errorf("list groups: %w", err)
		}
		return listed(nil, &resp)
	}
	var out []GroupListing
	answered := 0
	var lastErr error
	for _, id := range slices.Sorted(maps.Keys(brokers)) {
		var resp wire.ListGroupsResponse
		if err := c.Call(ctx, brokers[id], &wire.ListGroupsRequest{States: states}, &resp); err != nil {
			if errors.Is(err, ErrConnClosed) && ctx.Err() == nil {
				lastErr = err
				continue
			}
			return nil, fmt.Errorf("list groups at broker %d: %w", id, err)
		}
		answered++
		var err error
		if out, err = listed(out, &resp); err != nil {
			return nil, fmt.Errorf("list groups at broker %d: %w", id, err)
		}
	}
	if answered == 0 {
		return nil, fmt.Errorf("list groups: no broker answered: %w", lastErr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return slices.CompactFunc(out, func(a, b GroupListing) bool { return a.Group == b.Group }), nil
}

// listed appends resp's groups to out, sorted by id.
func listed(out []GroupListing, resp *wire.ListGroupsResponse) ([]GroupListing, error) {
	if resp.ErrorCode != wire.ErrNone {
		return nil, fmt.Errorf("list groups: %w", wire.CodeError(resp.ErrorCode, resp.ErrorMessage))
	}
	for _, g := range resp.Groups {
		out = append(out, GroupListing(g))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// DescribeGroup returns a group's state, generation and members (each member's
// Assignment is Kafka's consumer assignment encoding; see DecodeMemberAssignment).
func (c *Client) DescribeGroup(ctx context.Context, groupID string) (wire.DescribedGroup, error) {
	var resp wire.DescribeGroupsResponse
	err := c.groupCall(ctx, groupID, &wire.DescribeGroupsRequest{Groups: []string{groupID}}, &resp, func() wire.ErrorCode {
		if len(resp.Groups) == 1 {
			return resp.Groups[0].ErrorCode
		}
		return wire.ErrNone
	})
	if err != nil {
		return wire.DescribedGroup{}, fmt.Errorf("describe group %s: %w", groupID, err)
	}
	if len(resp.Groups) != 1 {
		return wire.DescribedGroup{}, fmt.Errorf("describe group %s: %d results", groupID, len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.ErrorCode != wire.ErrNone {
		return g, fmt.Errorf("describe group %s: %w", groupID, wire.CodeError(g.ErrorCode, g.ErrorMessage))
	}
	return g, nil
}

// DeleteGroup deletes an Empty group and its committed offsets (NON_EMPTY_GROUP when it
// has members, GROUP_ID_NOT_FOUND when there is no such group).
func (c *Client) DeleteGroup(ctx context.Context, groupID string) error {
	var resp wire.DeleteGroupsResponse
	err := c.groupCall(ctx, groupID, &wire.DeleteGroupsRequest{Groups: []string{groupID}}, &resp, func() wire.ErrorCode {
		if len(resp.Groups) == 1 {
			return resp.Groups[0].ErrorCode
		}
		return wire.ErrNone
	})
	if err != nil {
		return fmt.Errorf("delete group %s: %w", groupID, err)
	}
	if len(resp.Groups) != 1 {
		return fmt.Errorf("delete group %s: %d results", groupID, len(resp.Groups))
	}
	if r := resp.Groups[0]; r.ErrorCode != wire.ErrNone {
		return fmt.Errorf("delete group %s: %w", groupID, wire.CodeError(r.ErrorCode, r.ErrorMessage))
	}
	return nil
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// CommittedOffset is one partition's committed offset (-1: none).
type CommittedOffset struct {
	TopicPartition
	Offset   int64
	Metadata string
}

// FetchCommitted returns groupID's committed offsets: of the partitions named, or of all
// its partitions when none are.
func (c *Client) FetchCommitted(ctx context.Context, groupID string, partitions ...TopicPartition) ([]CommittedOffset, error) {
	req := &wire.OffsetFetchRequest{Group: groupID}
	if len(partitions) > 0 {
		req.Topics = []wire.OffsetFetchTopic{}
		for _, tp := range partitions {
			if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != tp.Topic {
				req.Topics = append(req.Topics, wire.OffsetFetchTopic{Topic: tp.Topic})
			}
			t := &req.Topics[len(req.Topics)-1]
			t.Partitions = append(t.Partitions, tp.Partition)
		}
	}
	var resp wire.OffsetFetchResponse
	if err := c.groupCall(ctx, groupID, req, &resp, func() wire.ErrorCode { return resp.ErrorCode }); err != nil {
		return nil, fmt.Errorf("fetch offsets of %s: %w", groupID, err)
	}
	if resp.ErrorCode != wire.ErrNone {
		return nil, fmt.Errorf("fetch offsets of %s: %w", groupID, wire.CodeError(resp.ErrorCode, resp.ErrorMessage))
	}
	var out []CommittedOffset
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, CommittedOffset{TopicPartition{t.Topic, p.Partition}, p.Offset, p.Metadata})
		}
	}
	return out, nil
}

// CommitOffsets commits offsets for groupID outside group management (generation -1, no
// member id): accepted only while the group has no members (`ringlog group reset`).
func (c *Client) CommitOffsets(ctx context.Context, groupID string, offsets []CommittedOffset) error {
	return c.commit(ctx, groupID, "", "", -1, offsets)
}

// commit sends one OffsetCommit and turns the first failed partition into the error.
func (c *Client) commit(ctx context.Context, groupID, memberID, instanceID string, generation int32, offsets []CommittedOffset) error {
	if len(offsets) == 0 {
		return nil
	}
	req := &wire.OffsetCommitRequest{Group: groupID, MemberID: memberID, InstanceID: instanceID, Generation: generation}
	sorted := append([]CommittedOffset(nil), offsets...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Topic != sorted[j].Topic {
			return sorted[i].Topic < sorted[j].Topic
		}
		return sorted[i].Partition < sorted[j].Partition
	})
	for _, o := range sorted {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != o.Topic {
			req.Topics = append(req.Topics, wire.OffsetCommitTopic{Topic: o.Topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, wire.OffsetCommitPartition{Partition: o.Partition, Offset: o.Offset, LeaderEpoch: -1, Metadata: o.Metadata})
	}
	var resp wire.OffsetCommitResponse
	firstCode := func() wire.ErrorCode {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != wire.ErrNone {
					return p.ErrorCode
				}
			}
		}
		return wire.ErrNone
	}
	if err := c.groupCall(ctx, groupID, req, &resp, firstCode); err != nil {
		return fmt.Errorf("commit offsets of %s: %w", groupID, err)
	}
	if code := firstCode(); code != wire.ErrNone {
		return fmt.Errorf("commit offsets of %s: %w", groupID, code)
	}
	return nil
}
