package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/replication/controller"
)

// quorum is what a Manager needs of the controller: its own voter (*controller.Controller)
// on a broker of the quorum, or, on a broker outside it, a follower of the metadata over
// the network (remoteQuorum).
type quorum interface {
	// Metadata is the current metadata, shared and read-only (controller.FSM.Metadata's
	// contract): nothing reached from it may be written; it never changes under the caller.
	Metadata() *controller.Metadata
	// Finalized is the metadata's finalized protocol version, without a copy.
	Finalized() uint16
	Changed(since uint64) <-chan struct{}
	Leader() (int32, string)
	IsLeader() bool
	Submit(cmd *controller.Command, timeout time.Duration) (controller.Result, error)
	Shutdown() error
}

// Watch bounds: how long a broker's metadata watch may park on the answering broker, and
// how long a watcher waits for its answer beyond that.
const (
	watchWaitMax    = 10 * time.Second
	watchWait       = 5 * time.Second
	watchAnswerMore = 5 * time.Second
)

// WatchRequest is the body of OpWatch: answer this broker's View once its metadata version
// is above Since, or after WaitMs (at most watchWaitMax).
type WatchRequest struct {
	Since  uint64
	WaitMs int64
}

// remoteQuorum follows the controller metadata for a broker that runs no voter: one
// goroutine long-polls (OpWatch) the controller leader's broker, or the seed brokers and
// every broker the metadata names in turn while no leader is known, and keeps the newest
// metadata it was answered (it never moves back to a lower version: brokers answer from
// their own voters, which may lag each other). It submits nothing itself: Submit answers
// ErrNotController, so that the Manager forwards every command to the leader's broker.
type remoteQuorum struct {
	self  int32
	seeds []string
	dial  Dialer
	log   *slog.Logger

	// meta is the newest metadata answered, read-only once stored (a decoded answer no one
	// else holds); written under mu, read without it.
	meta atomic.Pointer[controller.Metadata]

	mu      sync.Mutex
	leader  int32         // the controller leader the last answer named; guarded by mu
	synced  bool          // an answer arrived; guarded by mu
	changed chan struct{} // closed and replaced when meta or leader changes; guarded by mu

	// protocol is the inter-broker protocol version a watch carries for the metadata it
	// has (Manager.wireProtocol).
	protocol func(*controller.Metadata) uint16

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func startRemoteQuorum(self int32, seeds []string, dial Dialer, log *slog.Logger, protocol func(*controller.Metadata) uint16) *remoteQuorum {
	q := &remoteQuorum{self: self, seeds: seeds, dial: dial, log: log, protocol: protocol,
		changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	q.meta.Store(&controller.Metadata{Brokers: map[int32]*controller.Broker{}, Topics: map[string]*controller.Topic{}})
	go q.run()
	return q
}

func (q *remoteQuorum) Metadata() *controller.Metadata { return q.meta.Load() }

func (q *remoteQuorum) Finalized() uint16 { return q.meta.Load().Finalized() }

func (q *remoteQuorum) Changed(since uint64) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.meta.Load().Version > since {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return q.changed
}

func (q *remoteQuorum) Leader() (int32, string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.leader, ""
}

func (q *remoteQuorum) IsLeader() bool { return false }

func (q *remoteQuorum) Submit(*controller.Command, time.Duration) (controller.Result, error) {
	return controller.Result{}, fmt.Errorf("node %d runs no controller voter: %w", q.self, controller.ErrNotController)
}

func (q *remoteQuorum) Shutdown() error {
	q.once.Do(func() {
		close(q.stop)
		<-q.done
	})
	return nil
}

// isSynced reports whether a broker has answered at least once (a broker registers only
// then, so that it knows its previous session).
func (q *remoteQuorum) isSynced() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.synced
}

// install takes v's metadata when it is not older than what q holds.
func (q *remoteQuorum) install(v *View) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.synced = true
	moved := false
	if held := q.meta.Load(); v.Metadata.Version >= held.Version {
		moved = v.Metadata.Version > held.Version
		q.meta.Store(v.Metadata) // the caller keeps no hold on it
	}
	if v.ControllerLeader != 0 && v.ControllerLeader != q.leader {
		q.leader = v.ControllerLeader
		moved = true
	}
	if moved {
		close(q.changed)
		q.changed = make(chan struct{})
	}
}

// next is the address to watch: the controller leader's broker when known, else the next
// of the seeds and the brokers the metadata names, by turn.
func (q *remoteQuorum) next(turn int) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	md := q.meta.Load()
	if b := md.Brokers[q.leader]; b != nil && !b.Fenced && b.Address != "" {
		return b.Address
	}
	candidates := slices.Clone(q.seeds)
	for _, id := range slices.Sorted(func(yield func(int32) bool) {
		for id := range md.Brokers {
			if !yield(id) {
				return
			}
		}
	}) {
		if b := md.Brokers[id]; id != q.self && b.Address != "" && !slices.Contains(candidates, b.Address) {
			candidates = append(candidates, b.Address)
		}
	}
	return candidates[turn%len(candidates)]
}

func (q *remoteQuorum) forgetLeader() {
	q.mu.Lock()
	q.leader = 0
	q.mu.Unlock()
}

func (q *remoteQuorum) run() {
	defer close(q.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-q.stop
		cancel()
	}()
	var conn PeerConn
	var addr string
	closeConn := func() {
		if conn != nil {
			conn.Close()
			conn = nil
		}
	}
	defer closeConn()
	for turn := 0; ctx.Err() == nil; turn++ {
		target := q.next(turn)
		var v *View
		var err error
		if conn == nil || addr != target {
			closeConn()
			dctx, dcancel := context.WithTimeout(ctx, submitTimeout)
			conn, err = q.dial(dctx, target)
			dcancel()
			addr = target
		}
		if err == nil {
			v, err = q.watch(ctx, conn)
		}
		if err != nil {
			closeConn()
			q.forgetLeader()
			q.log.Debug("watch controller metadata", "broker", target, "err", err)
			if !q.pause() {
				return
			}
			continue
		}
		q.install(v)
		if v.ControllerLeader == 0 && !q.pause() { // the quorum is electing: do not spin
			return
		}
	}
}

func (q *remoteQuorum) pause() bool {
	select {
	case <-q.stop:
		return false
	case <-time.After(retryBackoff):
		return true
	}
}

// watch asks conn's broker for its view once its metadata is newer than ours.
func (q *remoteQuorum) watch(ctx context.Context, conn PeerConn) (*View, error) {
	md := q.meta.Load()
	since, protocol := md.Version, q.protocol(md)
	body, err := json.Marshal(&WatchRequest{Since: since, WaitMs: watchWait.Milliseconds()})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, watchWait+watchAnswerMore)
	defer cancel()
	out, err := conn.Controller(wctx, OpWatch, protocol, body)
	if err != nil {
		return nil, err
	}
	return DecodeView(out)
}

// ErrBadView refuses a cluster view that does not decode or lacks its metadata.
var ErrBadView = errors.New("bad cluster view")

// DecodeView decodes a broker's View (the answer of OpMetadata and OpWatch), with empty
// maps where the JSON had none.
func DecodeView(data []byte) (*View, error) {
	var v View
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadView, err)
	}
	if v.Metadata == nil {
		return nil, fmt.Errorf("%w: no metadata", ErrBadView)
	}
	if v.Metadata.Brokers == nil {
		v.Metadata.Brokers = map[int32]*controller.Broker{}
	}
	if v.Metadata.Topics == nil {
		v.Metadata.Topics = map[string]*controller.Topic{}
	}
	for id, b := range v.Metadata.Brokers {
		if b == nil || b.ID != id {
			return nil, fmt.Errorf("%w: broker %d", ErrBadView, id)
		}
	}
	for name, t := range v.Metadata.Topics {
		if t == nil || t.Name != name {
			return nil, fmt.Errorf("%w: topic %q", ErrBadView, name)
		}
		for i, p := range t.Partitions {
			if p.Index != int32(i) {
				return nil, fmt.Errorf("%w: topic %q partition %d", ErrBadView, name, i)
			}
		}
	}
	return &v, nil
}
