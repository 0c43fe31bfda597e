package isr_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/replication/isr"
)

// cluster simulates one partition replicated on n brokers: each replica has a log of
// records (value, epoch), a Leader or Follower state machine, and the cluster has a minimal
// controller (committed ISR, leader and partition epochs, clean election from the ISR).
// Every message between the pieces goes through the harness, which prints it: the scripts'
// golden output is the exact traffic.
type cluster struct {
	now       time.Time
	minInsync int
	lag       time.Duration
	replicas  []isr.ReplicaID
	nodes     map[isr.ReplicaID]*node

	// The controller's view.
	leader         isr.ReplicaID
	leaderEpoch    int32
	partitionEpoch int32
	isr            []isr.ReplicaID
	pending        []isr.AlterISR // AlterISR messages on their way to the controller

	nextID   uint64
	acked    map[uint64]ackedRange // acks=all and acks=1 produces answered ok
	consumed []string              // what consumers read, in order
	readPos  int64
}

type ackedRange struct {
	acks       int16
	base, end  int64
	values     []string
	leaderNode isr.ReplicaID
}

type record struct {
	value string
	epoch int32
}

type node struct {
	id       isr.ReplicaID
	alive    bool
	log      []record
	epochs   *isr.EpochCache
	leader   *isr.Leader
	follower *isr.Follower
	hwm      int64 // kept across role changes
}

func newCluster(replicas, minInsync int, lag time.Duration) *cluster {
	c := &cluster{
		now:       time.Unix(1_700_000_000, 0).UTC(),
		minInsync: minInsync,
		lag:       lag,
		nodes:     map[isr.ReplicaID]*node{},
		acked:     map[uint64]ackedRange{},
	}
	for i := 1; i <= replicas; i++ {
		id := isr.ReplicaID(i)
		c.replicas = append(c.replicas, id)
		epochs, _ := isr.NewEpochCache(nil)
		c.nodes[id] = &node{id: id, alive: true, epochs: epochs}
	}
	c.isr = slices.Clone(c.replicas)
	c.leader = c.replicas[0]
	c.leaderEpoch = 0
	c.partitionEpoch = 0
	c.becomeRoles(nil)
	return c
}

// becomeRoles makes the controller's leader a Leader and every other live replica its
// Follower.
func (c *cluster) becomeRoles(out *strings.Builder) {
	for _, id := range c.replicas {
		n := c.nodes[id]
		if !n.alive {
			continue
		}
		c.becomeRole(n, out)
	}
}

func (c *cluster) becomeRole(n *node, out *strings.Builder) {
	if n.leader != nil {
		n.hwm = n.leader.HighWatermark()
		n.leader.Resign()
		c.handleOutputs(n, out)
		n.leader = nil
	}
	if n.follower != nil {
		n.hwm = n.follower.HighWatermark()
		n.follower = nil
	}
	if c.leader == n.id {
		l, err := isr.NewLeader(isr.LeaderConfig{
			Self: n.id, Replicas: c.replicas, ISR: c.isr, LeaderEpoch: c.leaderEpoch,
			PartitionEpoch: c.partitionEpoch, LogEndOffset: int64(len(n.log)), HighWatermark: n.hwm,
			MinInsync: c.minInsync, ReplicaLagMax: c.lag, Now: c.now,
		}, n.epochs)
		if err != nil {
			panic(err)
		}
		n.leader = l
		c.printf(out, "n%d: leader epoch=%d isr=%s leo=%d hwm=%d", n.id, c.leaderEpoch, fmtIDs(c.isr), len(n.log), l.HighWatermark())
		c.handleOutputs(n, out)
		return
	}
	if c.leader == isr.NoReplica {
		return
	}
	n.follower = isr.NewFollower(n.id, c.leader, c.leaderEpoch, int64(len(n.log)), n.hwm, n.epochs)
	c.printf(out, "n%d: follower of n%d epoch=%d leo=%d phase=%s", n.id, c.leader, c.leaderEpoch, len(n.log), n.follower.Phase())
}

func (c *cluster) printf(out *strings.Builder, format string, args ...any) {
	if out != nil {
		fmt.Fprintf(out, format+"\n", args...)
	}
}

func fmtIDs(ids []isr.ReplicaID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return "(" + strings.Join(parts, ",") + ")"
}

func (c *cluster) leaderNode() *node {
	if c.leader == isr.NoReplica {
		return nil
	}
	n := c.nodes[c.leader]
	if !n.alive || n.leader == nil {
		return nil
	}
	return n
}

// handleOutputs prints a leader's outputs and routes them: AlterISR to the controller's
// queue, acks to the producers' record.
func (c *cluster) handleOutputs(n *node, out *strings.Builder) {
	if n.leader == nil {
		return
	}
	for _, o := range n.leader.Outputs() {
		c.printf(out, "n%d -> %v", n.id, o)
		switch o := o.(type) {
		case isr.AlterISR:
			c.pending = append(c.pending, o)
		case isr.Ack:
			if o.Err == nil {
				r := c.acked[o.ID]
				r.leaderNode = n.id
				c.acked[o.ID] = r
			} else {
				delete(c.acked, o.ID)
			}
		}
	}
}

// produce appends count records on the leader with acks.
func (c *cluster) produce(acks int16, values []string, out *strings.Builder) error {
	n := c.leaderNode()
	if n == nil {
		c.printf(out, "produce refused: no leader")
		return nil
	}
	if err := n.leader.CheckProduce(acks); err != nil {
		c.printf(out, "produce acks=%s refused: %v", acksName(acks), err)
		return nil
	}
	base := int64(len(n.log))
	for _, v := range values {
		n.log = append(n.log, record{value: v, epoch: c.leaderEpoch})
	}
	end := int64(len(n.log))
	c.nextID++
	id := c.nextID
	c.printf(out, "n%d: append id=%d [%d,%d) epoch=%d acks=%s", n.id, id, base, end, c.leaderEpoch, acksName(acks))
	n.leader.Appended(c.now, end)
	c.acked[id] = ackedRange{acks: acks, base: base, end: end, values: values, leaderNode: n.id}
	if acks == isr.AcksAll {
		// The record of an acks=all produce counts as acknowledged once its Ack says ok.
		r := c.acked[id]
		r.leaderNode = isr.NoReplica
		c.acked[id] = r
		n.leader.WaitAcksAll(id, end)
	} else {
		c.printf(out, "n%d -> ack id=%d end=%d ok (acks=%s)", n.id, id, end, acksName(acks))
	}
	c.handleOutputs(n, out)
	return nil
}

func acksName(acks int16) string {
	if acks == isr.AcksAll {
		return "all"
	}
	return strconv.Itoa(int(acks))
}

// fetch runs one follower round: the epoch question and truncation when the follower needs
// them, then one fetch of up to maxRecords records.
// dropResponse loses the fetch response on its way back: the leader applied the fetch, the
// follower learns nothing. epoch, when set, replaces the follower's current leader epoch.
// epochRoundsMax bounds the OffsetsForLeaderEpoch exchange of one fetch step (each round
// removes at least one epoch from the follower).
const epochRoundsMax = 64

func (c *cluster) fetch(id isr.ReplicaID, maxRecords int, dropResponse bool, epoch *int32, out *strings.Builder) error {
	n := c.nodes[id]
	if !n.alive || n.follower == nil {
		return fmt.Errorf("n%d is not a live follower", id)
	}
	ln := c.leaderNode()
	if ln == nil {
		c.printf(out, "n%d: no leader to fetch from", id)
		return nil
	}
	f := n.follower
	for rounds := 0; f.Phase() == isr.Truncating; rounds++ {
		if rounds == epochRoundsMax {
			return fmt.Errorf("n%d still truncating after %d OffsetsForLeaderEpoch rounds", id, rounds)
		}
		req := f.EpochRequest()
		c.printf(out, "n%d -> n%d: offsets-for-leader-epoch current=%d epoch=%d", id, ln.id, req.CurrentLeaderEpoch, req.Epoch)
		answer, err := ln.leader.OffsetsForLeaderEpoch(req.CurrentLeaderEpoch, req.Epoch)
		if err != nil {
			c.printf(out, "n%d -> n%d: error %v", ln.id, id, err)
			return nil
		}
		c.printf(out, "n%d -> n%d: %v", ln.id, id, answer)
		before := f.LogEndOffset()
		to := f.EpochAnswered(answer)
		if to < before {
			dropped := n.log[to:]
			n.log = n.log[:to]
			c.printf(out, "n%d: truncate to %d (dropped %s)", id, to, fmtRecords(dropped))
		} else {
			c.printf(out, "n%d: no truncation (leo=%d)", id, before)
		}
	}
	req := f.FetchRequest()
	if epoch != nil {
		req.CurrentLeaderEpoch = *epoch
	}
	c.printf(out, "n%d -> n%d: fetch offset=%d epoch=%d", id, ln.id, req.FetchOffset, req.CurrentLeaderEpoch)
	resp := ln.leader.Fetch(c.now, req)
	var batches []isr.BatchEpoch
	var records []record
	if resp.Err == nil {
		end := min(int64(len(ln.log)), req.FetchOffset+int64(maxRecords))
		records = slices.Clone(ln.log[req.FetchOffset:end])
		for i, r := range records {
			off := req.FetchOffset + int64(i)
			if len(batches) > 0 && batches[len(batches)-1].Epoch == r.epoch {
				batches[len(batches)-1].EndOffset = off + 1
			} else {
				batches = append(batches, isr.BatchEpoch{Epoch: r.epoch, BaseOffset: off, EndOffset: off + 1})
			}
		}
	}
	if resp.Err != nil {
		c.printf(out, "n%d -> n%d: fetch error %v hwm=%d leo=%d", ln.id, id, resp.Err, resp.HighWatermark, resp.LogEndOffset)
	} else {
		c.printf(out, "n%d -> n%d: records %s hwm=%d leo=%d", ln.id, id, fmtRecords(records), resp.HighWatermark, resp.LogEndOffset)
	}
	c.handleOutputs(ln, out)
	if dropResponse {
		c.printf(out, "n%d: response lost", id)
		return nil
	}
	n.log = append(n.log, records...)
	if err := f.Appended(batches); err != nil {
		return err
	}
	_ = f.Fetched(resp)
	c.printf(out, "n%d: leo=%d hwm=%d", id, f.LogEndOffset(), f.HighWatermark())
	return nil
}

func fmtRecords(rs []record) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s@%d", r.value, r.epoch)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// deliverISR hands the oldest pending AlterISR to the controller, which accepts it only
// from the current leader at the current leader and partition epochs.
func (c *cluster) deliverISR(drop bool, out *strings.Builder) {
	if len(c.pending) == 0 {
		c.printf(out, "no alter-isr pending")
		return
	}
	a := c.pending[0]
	c.pending = c.pending[1:]
	if drop {
		c.printf(out, "controller: dropped %v", a)
		return
	}
	if a.Leader != c.leader || a.LeaderEpoch != c.leaderEpoch || a.PartitionEpoch != c.partitionEpoch {
		c.printf(out, "controller: rejected %v (leader=%d leader-epoch=%d partition-epoch=%d)", a, c.leader, c.leaderEpoch, c.partitionEpoch)
		if n := c.nodes[a.Leader]; n.alive && n.leader != nil {
			n.leader.ISRRejected(a)
			c.handleOutputs(n, out)
		}
		return
	}
	c.isr = slices.Clone(a.ISR)
	c.partitionEpoch++
	c.printf(out, "controller: isr=%s partition-epoch=%d", fmtIDs(c.isr), c.partitionEpoch)
	if n := c.nodes[a.Leader]; n.alive && n.leader != nil {
		n.leader.ISRCommitted(c.now, c.isr, c.partitionEpoch)
		c.handleOutputs(n, out)
	}
}

// crash stops a replica: its log survives (as a restarted broker finds it), its state
// machines do not.
func (c *cluster) crash(id isr.ReplicaID, out *strings.Builder) {
	n := c.nodes[id]
	n.alive = false
	if n.leader != nil {
		n.hwm = n.leader.HighWatermark()
		n.leader = nil // a crash answers nothing
	}
	if n.follower != nil {
		n.hwm = n.follower.HighWatermark()
		n.follower = nil
	}
	c.printf(out, "n%d: crashed (log %s)", id, fmtRecords(n.log))
}

// elect is the controller's reaction to the leader's session expiring: the dead replicas
// leave the ISR (the last member stays, so that an unclean choice stays visible) and a live
// ISR member becomes leader at the next leader epoch; unclean allows any live replica.
func (c *cluster) elect(unclean bool, out *strings.Builder) {
	alive := func(id isr.ReplicaID) bool { return c.nodes[id].alive }
	newISR := slices.DeleteFunc(slices.Clone(c.isr), func(id isr.ReplicaID) bool { return !alive(id) })
	leader := isr.NoReplica
	for _, id := range c.replicas {
		if alive(id) && slices.Contains(newISR, id) {
			leader = id
			break
		}
	}
	if leader == isr.NoReplica && unclean {
		for _, id := range c.replicas {
			if alive(id) {
				leader = id
				newISR = []isr.ReplicaID{id}
				c.printf(out, "controller: unclean election")
				break
			}
		}
	}
	if len(newISR) == 0 {
		newISR = c.isr[len(c.isr)-1:]
	}
	c.isr = newISR
	c.leader = leader
	c.leaderEpoch++
	c.partitionEpoch++
	c.printf(out, "controller: leader=%d leader-epoch=%d isr=%s partition-epoch=%d", leader, c.leaderEpoch, fmtIDs(c.isr), c.partitionEpoch)
	c.becomeRoles(out)
}

// restart brings a crashed replica back as a follower of the current leader. A broker the
// controller still takes for the leader comes back with a new session: the controller
// elects again (a new leader epoch), as it would on the re-registration.
func (c *cluster) restart(id isr.ReplicaID, out *strings.Builder) {
	n := c.nodes[id]
	n.alive = true
	if c.leader == id {
		c.elect(false, out)
		return
	}
	c.becomeRole(n, out)
}

// tick advances the clock and ticks the leader.
func (c *cluster) tick(d time.Duration, out *strings.Builder) {
	c.now = c.now.Add(d)
	if n := c.leaderNode(); n != nil {
		n.leader.Tick(c.now)
		c.handleOutputs(n, out)
	}
}

// consume reads from the leader up to its high watermark.
func (c *cluster) consume(out *strings.Builder) {
	n := c.leaderNode()
	if n == nil {
		c.printf(out, "consume: no leader")
		return
	}
	hwm := n.leader.HighWatermark()
	if c.readPos > hwm {
		c.printf(out, "consume: position %d above the high watermark %d", c.readPos, hwm)
		return
	}
	got := n.log[c.readPos:hwm]
	for _, r := range got {
		c.consumed = append(c.consumed, r.value)
	}
	c.printf(out, "consume [%d,%d) %s", c.readPos, hwm, fmtRecords(got))
	c.readPos = hwm
}

func (c *cluster) state(out *strings.Builder) {
	c.printf(out, "controller: leader=%d leader-epoch=%d isr=%s partition-epoch=%d pending=%d",
		c.leader, c.leaderEpoch, fmtIDs(c.isr), c.partitionEpoch, len(c.pending))
	for _, id := range c.replicas {
		n := c.nodes[id]
		role := "down"
		hwm := n.hwm
		switch {
		case n.alive && n.leader != nil:
			role = "leader"
			hwm = n.leader.HighWatermark()
		case n.alive && n.follower != nil:
			role = "follower(" + n.follower.Phase().String() + ")"
			hwm = n.follower.HighWatermark()
		case n.alive:
			role = "idle"
		}
		c.printf(out, "n%d %s leo=%d hwm=%d epochs=%v log=%s", id, role, len(n.log), hwm, n.epochs.Entries(), fmtRecords(n.log))
	}
}

// checkInvariants returns the first broken safety property:
//   - every acks=all record acknowledged ok is on the current leader at its offset;
//   - the live replicas agree byte for byte below the leader's high watermark;
//   - every record a consumer read is still at its offset on the leader.
func (c *cluster) checkInvariants() error {
	ln := c.leaderNode()
	if ln == nil {
		return nil
	}
	for id, r := range c.acked {
		if r.acks != isr.AcksAll || r.leaderNode == isr.NoReplica {
			continue
		}
		for i, v := range r.values {
			off := r.base + int64(i)
			if off >= int64(len(ln.log)) || ln.log[off].value != v {
				return fmt.Errorf("acks=all produce %d: record %q at offset %d lost on leader n%d (log %s)", id, v, off, ln.id, fmtRecords(ln.log))
			}
		}
	}
	hwm := ln.leader.HighWatermark()
	for _, id := range ln.leader.ISR() {
		n := c.nodes[id]
		if !n.alive || id == ln.id {
			continue
		}
		if int64(len(n.log)) < hwm {
			continue // a follower of the ISR that has not fetched since a restart
		}
		for off := int64(0); off < hwm; off++ {
			if n.log[off] != ln.log[off] {
				return fmt.Errorf("n%d differs from leader n%d at %d below hwm %d", id, ln.id, off, hwm)
			}
		}
	}
	for off, v := range c.consumed {
		if int64(off) >= int64(len(ln.log)) || ln.log[off].value != v {
			return fmt.Errorf("consumed %q at %d vanished from leader n%d", v, off, ln.id)
		}
	}
	return nil
}

var errUsage = errors.New("usage")
