package group

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/group/assign"
)

// The scripts in testdata/*.txt drive a Coordinator with simulated consumers. The harness
// plays the clients the way Kafka's consumer does: it joins, syncs (the leader runs the
// assignor named by the chosen protocol), heartbeats, rejoins when told a rebalance is in
// progress, and, under the cooperative protocol, revokes what the assignment took away and
// rejoins for the follow-up round. It also plays the broker: Append outputs are encoded as
// real record batches and kept as the __consumer_offsets log, so `restart` can rebuild the
// coordinator from them. Regenerate the expected output with
//
//	go test ./engine/group -run TestScripts -rewrite
//
// Commands (key=value arguments):
//
//	init [partitions=N] [initial-delay=D] [retention=D]      a new coordinator serving every partition
//	topic name=T partitions=N                                a topic the assignors see
//	client name=C [instance=I] [assignor=A,...] [topics=T,...] [session=D] [rebalance=D]
//	join C | sync C | heartbeat C [generation=N] | leave C
//	commit C T/P=OFFSET... [generation=N]                    generation -1: a commit from outside the group
//	crash C                                                  the process stops (or pauses): no more heartbeats
//	wake C                                                   a paused process resumes, unaware of what happened
//	restart-client C [old=Z]                                 a new process (no member id); Z keeps the old identity
//	stabilize                                                the live clients act until nothing changes
//	advance D [every=D] [heartbeat=C,...]                    time passes; listed clients heartbeat each step
//	describe | offsets | list | delete | restart             restart rebuilds a coordinator from the log
//	appends ok|fail                                          make the next appends succeed or fail
const scriptGroup = "g"

var debugScripts = os.Getenv("GROUP_SCRIPT_DEBUG") != ""

type simClient struct {
	name, instance         string
	assignors, topics      []string
	session, rebalance     time.Duration
	memberID               string
	generation             int32
	leader                 bool
	members                []JoinedMember // the leader's view of the last join
	protocol               string
	owned                  []assign.TopicPartition
	alive                  bool
	needJoin, needSync     bool
	joinSent, syncSent     bool
	fenced                 bool
	lastHeartbeat          Code
	heartbeatsOK, rejoined int
}

type harness struct {
	t        *testing.T
	cfg      Config
	c        *Coordinator
	now      time.Time
	topics   map[string]int32
	clients  map[string]*simClient
	log      map[int32][][]byte // __consumer_offsets batches per partition
	builder  *batch.Builder
	nextReq  uint64
	reqs     map[uint64]*simClient
	failNext bool
	out      *strings.Builder
	quiet    bool // do not print successful heartbeats
}

func newHarness(t *testing.T) *harness {
	return &harness{t: t, topics: map[string]int32{}, clients: map[string]*simClient{},
		log: map[int32][][]byte{}, builder: batch.NewBuilder(batch.BuilderOptions{}),
		reqs: map[uint64]*simClient{}, now: time.UnixMilli(1_700_000_000_000).UTC()}
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) { runScript(t, path) })
	}
}

func runScript(t *testing.T, path string) {
	h := newHarness(t)
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		h.t = t
		h.out = &strings.Builder{}
		h.run(d)
		return h.out.String()
	})
}

func (h *harness) printf(format string, args ...any) { fmt.Fprintf(h.out, format, args...) }

func dur(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

func argOr(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}

func argList(d *datadriven.TestData, key string, def []string) []string {
	if a, ok := d.Arg(key); ok {
		return a.Vals
	}
	return def
}

func (h *harness) client(d *datadriven.TestData) *simClient {
	if len(d.CmdArgs) == 0 {
		h.t.Fatalf("%s: which client?", d.Cmd)
	}
	c := h.clients[d.CmdArgs[0].Key]
	if c == nil {
		h.t.Fatalf("%s: unknown client %q", d.Cmd, d.CmdArgs[0].Key)
	}
	return c
}

func (h *harness) run(d *datadriven.TestData) {
	switch d.Cmd {
	case "init":
		partitions, _ := strconv.Atoi(argOr(d, "partitions", "1"))
		h.cfg = Config{OffsetsPartitions: int32(partitions), InitialRebalanceDelay: dur(h.t, argOr(d, "initial-delay", "0s"))}
		if r := argOr(d, "retention", ""); r != "" {
			h.cfg.OffsetsRetention = dur(h.t, r)
		}
		h.c = New(h.cfg)
		for p := range int32(partitions) {
			if err := h.c.Load(h.now, p, NewReplayer().Snapshot()); err != nil {
				h.t.Fatal(err)
			}
		}
		h.printf("serving %d partitions; group %q lives in partition %d\n", partitions, scriptGroup,
			PartitionFor(scriptGroup, int32(partitions)))
	case "topic":
		n, _ := strconv.Atoi(argOr(d, "partitions", "1"))
		h.topics[argOr(d, "name", "t")] = int32(n)
	case "client":
		c := &simClient{name: argOr(d, "name", ""), instance: argOr(d, "instance", ""),
			assignors: argList(d, "assignor", []string{assign.Range}), topics: argList(d, "topics", []string{"t"}),
			session: dur(h.t, argOr(d, "session", "10s")), rebalance: dur(h.t, argOr(d, "rebalance", "30s")),
			generation: -1, alive: true, needJoin: true}
		h.clients[c.name] = c
	case "join":
		h.join(h.client(d))
		h.drain()
	case "sync":
		h.sync(h.client(d))
		h.drain()
	case "heartbeat":
		c := h.client(d)
		gen := c.generation
		if a, ok := d.Arg("generation"); ok {
			n, _ := strconv.Atoi(a.Vals[0])
			gen = int32(n)
		}
		h.send(c, Heartbeat{Group: scriptGroup, MemberID: c.memberID, InstanceID: c.instance, Generation: gen})
		h.drain()
	case "leave":
		c := h.client(d)
		h.send(c, LeaveGroup{Group: scriptGroup, Members: []LeavingMember{{MemberID: c.memberID, InstanceID: c.instance}}})
		h.drain()
	case "commit":
		h.commit(d)
	case "crash":
		h.client(d).alive = false
	case "wake":
		h.client(d).alive = true
	case "restart-client":
		c := h.client(d)
		if old := argOr(d, "old", ""); old != "" { // keep the dead process's identity around
			zombie := *c
			zombie.name, zombie.alive = old, false
			h.clients[old] = &zombie
		}
		*c = simClient{name: c.name, instance: c.instance, assignors: c.assignors, topics: c.topics,
			session: c.session, rebalance: c.rebalance, generation: -1, alive: true, needJoin: true}
	case "stabilize":
		h.stabilize()
	case "advance":
		h.advance(d)
	case "describe":
		h.describe()
	case "offsets":
		h.send(nil, OffsetFetch{Group: scriptGroup})
		h.drain()
	case "list":
		h.send(nil, ListGroups{})
		h.drain()
	case "delete":
		h.send(nil, DeleteGroups{Groups: []string{scriptGroup}})
		h.drain()
	case "appends":
		h.failNext = d.CmdArgs[0].Key == "fail"
	case "restart":
		h.restartCoordinator()
	default:
		h.t.Fatalf("unknown command %q", d.Cmd)
	}
}

func (h *harness) send(c *simClient, r Request) {
	h.nextReq++
	switch x := r.(type) {
	case JoinGroup:
		x.ReqID = h.nextReq
		r = x
	case SyncGroup:
		x.ReqID = h.nextReq
		r = x
	case Heartbeat:
		x.ReqID = h.nextReq
		r = x
	case LeaveGroup:
		x.ReqID = h.nextReq
		r = x
	case OffsetCommit:
		x.ReqID = h.nextReq
		r = x
	case OffsetFetch:
		x.ReqID = h.nextReq
		r = x
	case ListGroups:
		x.ReqID = h.nextReq
		r = x
	case DeleteGroups:
		x.ReqID = h.nextReq
		r = x
	}
	h.reqs[h.nextReq] = c
	h.c.Handle(h.now, r)
}

func (h *harness) join(c *simClient) {
	// An eager member stops consuming everything before it rejoins; a cooperative one keeps
	// consuming what it owns and reports it. Kafka's eager sticky assignor still reports its
	// previous assignment (in its user data) so that the plan can stick to it.
	reported := c.owned
	if len(c.assignors) > 0 && !assign.Cooperative(c.assignors[0]) {
		c.owned = nil
	}
	var protocols []Protocol
	for _, name := range c.assignors {
		sub := assign.Subscription{Topics: c.topics, Owned: reported, Generation: c.generation}
		protocols = append(protocols, Protocol{Name: name, Metadata: assign.EncodeSubscription(nil, sub)})
	}
	c.needJoin, c.needSync, c.joinSent = false, false, true
	h.send(c, JoinGroup{Group: scriptGroup, MemberID: c.memberID, InstanceID: c.instance, ClientID: c.name,
		ClientHost: "/127.0.0.1", SessionTimeout: c.session, RebalanceTimeout: c.rebalance,
		ProtocolType: assign.ProtocolType, Protocols: protocols})
}

func (h *harness) sync(c *simClient) {
	req := SyncGroup{Group: scriptGroup, MemberID: c.memberID, InstanceID: c.instance, Generation: c.generation,
		ProtocolType: assign.ProtocolType, Protocol: c.protocol}
	if c.leader && len(c.members) > 0 {
		assignor, ok := assign.ByName(c.protocol)
		if !ok {
			h.t.Fatalf("no assignor %q", c.protocol)
		}
		var members []assign.Member
		for _, m := range c.members {
			sub, err := assign.DecodeSubscription(m.Metadata)
			if err != nil {
				h.t.Fatalf("leader decodes %s: %v", m.MemberID, err)
			}
			members = append(members, sub.Member(m.MemberID, m.InstanceID))
		}
		plan := assignor.Assign(members, h.topics)
		for _, m := range c.members {
			req.Assignments = append(req.Assignments, MemberAssignment{MemberID: m.MemberID,
				Assignment: assign.EncodeAssignment(nil, assign.Assignment{Partitions: plan[m.MemberID]})})
		}
	}
	c.needSync, c.syncSent = false, true
	h.send(c, req)
}

func (h *harness) commit(d *datadriven.TestData) {
	c := h.client(d)
	req := OffsetCommit{Group: scriptGroup, MemberID: c.memberID, InstanceID: c.instance, Generation: c.generation}
	for _, a := range d.CmdArgs[1:] {
		if a.Key == "generation" {
			n, _ := strconv.Atoi(a.Vals[0])
			req.Generation = int32(n)
			if n < 0 {
				req.MemberID, req.InstanceID = "", ""
			}
			continue
		}
		topic, part, _ := strings.Cut(a.Key, "/")
		p, _ := strconv.Atoi(part)
		off, _ := strconv.ParseInt(a.Vals[0], 10, 64)
		req.Offsets = append(req.Offsets, CommitOffset{Topic: topic, Partition: int32(p), Offset: off, LeaderEpoch: -1})
	}
	if d.HasArg("generation") {
		// A late request of an older generation, or one from outside the group: its reply
		// does not change what the client knows.
		shadow := *c
		shadow.name += "(gen " + strconv.Itoa(int(req.Generation)) + ")"
		c = &shadow
	}
	h.send(c, req)
	h.drain()
}

// drain carries out the coordinator's outputs until there are none: appends go to the log
// (or fail), replies go to their clients.
func (h *harness) drain() {
	for range 1000 {
		outs := h.c.Ready()
		if len(outs) == 0 {
			return
		}
		for _, o := range outs {
			switch o := o.(type) {
			case Append:
				h.appendRecords(o)
			case Reply:
				h.deliver(h.reqs[o.ReqID], o.Response)
				delete(h.reqs, o.ReqID)
			}
		}
	}
	h.t.Fatal("drain: outputs did not stop")
}

func (h *harness) appendRecords(a Append) {
	var parts []string
	for _, rec := range a.Records {
		parts = append(parts, describeRecord(h.t, rec))
	}
	if h.failNext {
		h.printf("append p%d FAILED: %s\n", a.Partition, strings.Join(parts, "; "))
		h.c.AppendDone(h.now, a.ID, fmt.Errorf("injected: %w", errStorage))
		return
	}
	b, err := EncodeBatch(nil, h.builder, a.Records, h.now.UnixMilli())
	if err != nil {
		h.t.Fatal(err)
	}
	h.log[a.Partition] = append(h.log[a.Partition], b)
	h.printf("append p%d: %s\n", a.Partition, strings.Join(parts, "; "))
	h.c.AppendDone(h.now, a.ID, nil)
}

var errStorage = fmt.Errorf("storage error")

func describeRecord(t *testing.T, rec Record) string {
	k, err := DecodeKey(rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	if k.Kind == KeyOffset {
		if rec.Value == nil {
			return fmt.Sprintf("offset %s %s/%d deleted", k.Group, k.Topic, k.Partition)
		}
		v, err := DecodeOffsetValue(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("offset %s %s/%d=%d", k.Group, k.Topic, k.Partition, v.Offset)
	}
	if rec.Value == nil {
		return fmt.Sprintf("group %s deleted", k.Group)
	}
	v, err := DecodeGroupValue(rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, m := range v.Members {
		a, err := assign.DecodeAssignment(m.Assignment)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, fmt.Sprintf("%s[%s]", m.MemberID, tps(a.Partitions)))
	}
	return fmt.Sprintf("group %s gen=%d protocol=%q leader=%q members=%s", k.Group, v.Generation, v.Protocol,
		v.Leader, strings.Join(members, ","))
}

func tps(ps []assign.TopicPartition) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%s/%d", p.Topic, p.Partition))
	}
	return strings.Join(s, " ")
}

func (h *harness) deliver(c *simClient, resp Response) {
	name := "admin"
	if c != nil {
		name = c.name
	}
	switch r := resp.(type) {
	case JoinGroupResponse:
		c.joinSent = false
		if r.Err != CodeNone {
			h.printf("%s <- join: %s\n", name, r.Err)
			h.onError(c, r.Err)
			return
		}
		c.memberID, c.generation, c.protocol = r.MemberID, r.Generation, r.Protocol
		c.leader, c.members = r.Leader == r.MemberID, r.Members
		c.needSync = true
		var ids []string
		for _, m := range r.Members {
			ids = append(ids, m.MemberID)
		}
		h.printf("%s <- join: gen=%d member=%s leader=%s protocol=%s", name, r.Generation, r.MemberID, r.Leader, r.Protocol)
		if len(ids) > 0 {
			h.printf(" members=%s", strings.Join(ids, ","))
		}
		h.printf("\n")
	case SyncGroupResponse:
		c.syncSent = false
		if r.Err != CodeNone {
			h.printf("%s <- sync: %s\n", name, r.Err)
			h.onError(c, r.Err)
			return
		}
		a, err := assign.DecodeAssignment(r.Assignment)
		if err != nil {
			h.t.Fatal(err)
		}
		var revoked []assign.TopicPartition
		for _, tp := range c.owned {
			if !slices.Contains(a.Partitions, tp) {
				revoked = append(revoked, tp)
			}
		}
		c.owned = a.Partitions
		h.checkSingleOwners()
		h.printf("%s <- sync: owns [%s]", name, tps(a.Partitions))
		if len(revoked) > 0 {
			h.printf(" revoked [%s]", tps(revoked))
			if assign.Cooperative(c.protocol) {
				c.needJoin = true // the follow-up round hands the revoked partitions out
				h.printf(", rejoins")
			}
		}
		h.printf("\n")
	case HeartbeatResponse:
		c.lastHeartbeat = r.Err
		if r.Err == CodeNone {
			c.heartbeatsOK++
			if h.quiet {
				return
			}
		}
		h.printf("%s <- heartbeat: %s\n", name, r.Err)
		h.onError(c, r.Err)
	case LeaveGroupResponse:
		h.printf("%s <- leave: %s", name, r.Err)
		for _, m := range r.Members {
			h.printf(" %s:%s", m.MemberID, m.Err)
		}
		h.printf("\n")
		if r.Err == CodeNone {
			c.memberID, c.generation, c.owned, c.alive = "", -1, nil, false
		}
	case OffsetCommitResponse:
		var parts []string
		for _, p := range r.Partitions {
			parts = append(parts, fmt.Sprintf("%s/%d:%s", p.Topic, p.Partition, p.Err))
		}
		h.printf("%s <- commit: %s\n", name, strings.Join(parts, " "))
		if len(r.Partitions) > 0 {
			h.onError(c, r.Partitions[0].Err)
		}
	case OffsetFetchResponse:
		h.printf("offsets: %s", r.Err)
		for _, p := range r.Partitions {
			h.printf(" %s/%d=%d", p.Topic, p.Partition, p.Offset)
		}
		h.printf("\n")
	case ListGroupsResponse:
		h.printf("list: %s", r.Err)
		for _, g := range r.Groups {
			h.printf(" %s(%s,%s)", g.Group, g.ProtocolType, g.State)
		}
		h.printf("\n")
	case DeleteGroupsResponse:
		for _, g := range r.Results {
			h.printf("delete %s: %s\n", g.Group, g.Err)
		}
	default:
		h.t.Fatalf("unexpected response %T", resp)
	}
}

// checkSingleOwners fails the script if two running clients consume one partition: what
// generations, fencing and the cooperative protocol together guarantee.
func (h *harness) checkSingleOwners() {
	owner := map[assign.TopicPartition]string{}
	for _, c := range h.liveClients() {
		for _, tp := range c.owned {
			if prev, dup := owner[tp]; dup {
				h.t.Fatalf("%s/%d consumed by both %s and %s", tp.Topic, tp.Partition, prev, c.name)
			}
			owner[tp] = c.name
		}
	}
}

// onError is how a Kafka consumer reacts to a group error.
func (h *harness) onError(c *simClient, code Code) {
	if c == nil {
		return
	}
	switch code {
	case CodeRebalanceInProgress:
		c.needJoin = true
	case CodeIllegalGeneration, CodeUnknownMemberID:
		// Its generation is over: it lost its partitions and starts again.
		c.memberID, c.generation, c.owned, c.needJoin = "", -1, nil, true
	case CodeFencedInstanceID:
		c.fenced, c.alive = true, false
	}
}

func (h *harness) liveClients() []*simClient {
	var out []*simClient
	for _, name := range slices.Sorted(maps.Keys(h.clients)) {
		if c := h.clients[name]; c.alive && !c.fenced {
			out = append(out, c)
		}
	}
	return out
}

// stabilize lets the live clients act (join, sync, heartbeat and react) until a round
// changes nothing.
func (h *harness) stabilize() {
	h.quiet = true
	defer func() { h.quiet = false }()
	for range 50 {
		acted := false
		for _, c := range h.liveClients() {
			switch {
			case c.needJoin && !c.joinSent:
				if debugScripts {
					h.printf("DEBUG %s joins\n", c.name)
				}
				h.join(c)
				acted = true
			case c.needSync && !c.syncSent && !c.joinSent:
				if debugScripts {
					h.printf("DEBUG %s syncs gen %d\n", c.name, c.generation)
				}
				h.sync(c)
				acted = true
			}
			h.drain()
		}
		if acted {
			continue
		}
		for _, c := range h.liveClients() {
			if c.memberID != "" && !c.joinSent && !c.syncSent {
				h.send(c, Heartbeat{Group: scriptGroup, MemberID: c.memberID, InstanceID: c.instance, Generation: c.generation})
				h.drain()
				if c.needJoin {
					acted = true
				}
			}
		}
		if !acted {
			return
		}
	}
	h.t.Fatalf("stabilize: the group did not settle in 50 rounds:\n%s", h.out.String()[:min(h.out.Len(), 3000)])
}

func (h *harness) advance(d *datadriven.TestData) {
	total := dur(h.t, d.CmdArgs[0].Key)
	every := dur(h.t, argOr(d, "every", d.CmdArgs[0].Key))
	var beating []*simClient
	for _, name := range argList(d, "heartbeat", nil) {
		beating = append(beating, h.clients[name])
	}
	h.quiet = true
	defer func() { h.quiet = false }()
	for elapsed := time.Duration(0); elapsed < total; elapsed += every {
		h.now = h.now.Add(every)
		h.printf("t+%s\n", elapsed+every)
		for _, c := range beating {
			if c.alive && c.memberID != "" && !c.joinSent {
				h.send(c, Heartbeat{Group: scriptGroup, MemberID: c.memberID, InstanceID: c.instance, Generation: c.generation})
			}
		}
		h.c.Tick(h.now)
		h.drain()
	}
	// Only the lines with something to say stay: drop bare "t+..." lines.
	var kept []string
	lines := strings.Split(strings.TrimSuffix(h.out.String(), "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "t+") && (i+1 == len(lines) || strings.HasPrefix(lines[i+1], "t+")) {
			continue
		}
		kept = append(kept, l)
	}
	h.out.Reset()
	if len(kept) > 0 {
		h.printf("%s\n", strings.Join(kept, "\n"))
	}
	h.printf("now t=%s\n", h.now.Sub(time.UnixMilli(1_700_000_000_000)))
}

func (h *harness) describe() {
	h.send(nil, DescribeGroups{ReqID: 0, Groups: []string{scriptGroup}})
	for _, o := range h.c.Ready() {
		r, ok := o.(Reply)
		if !ok {
			continue
		}
		for _, g := range r.Response.(DescribeGroupsResponse).Groups {
			h.printf("group %s: %s gen=%d protocol=%s leader=%s\n", g.Group, g.State, g.Generation, g.Protocol, g.Leader)
			for _, m := range g.Members {
				a, err := assign.DecodeAssignment(m.Assignment)
				if err != nil {
					h.t.Fatal(err)
				}
				inst := ""
				if m.InstanceID != "" {
					inst = " instance=" + m.InstanceID
				}
				h.printf("  %s%s [%s]\n", m.MemberID, inst, tps(a.Partitions))
			}
		}
	}
	for _, c := range h.liveClients() {
		if c.memberID != "" {
			h.printf("  client %s consumes [%s]\n", c.name, tps(c.owned))
		}
	}
}

func (h *harness) restartCoordinator() {
	h.cfg.Incarnation++
	h.c = New(h.cfg)
	for p := range h.cfg.OffsetsPartitions {
		snap, err := Rebuild(h.log[p])
		if err != nil {
			h.t.Fatal(err)
		}
		h.c.BeginLoad(p)
		if err := h.c.Load(h.now, p, snap); err != nil {
			h.t.Fatal(err)
		}
		if len(h.log[p]) > 0 {
			h.printf("p%d: replayed %d records from %d batches, %d groups\n", p, snap.Records, len(h.log[p]), len(snap.Groups))
		}
	}
}
