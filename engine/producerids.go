package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ringlog/ringlog/ring"
)

// Producer ids: the broker-wide allocation behind InitProducerId. A producer without a name
// gets a fresh id at epoch 0. A producer with a stable name (Kafka's transactional.id) gets
// the id that name had before with the epoch bumped by one, so every batch the previous
// instance still sends carries an older epoch and is refused (fenced). When the epoch would
// pass math.MaxInt16-1 the name moves to a fresh id at epoch 0, as in Kafka.
//
// The state is one JSON document in the data directory, replaced atomically (temp file,
// fsync, rename, fsync of the directory) before an id or epoch is handed out, so a restarted
// broker never hands out an id twice nor lets a fenced epoch back in:
//
//	{
//	  "version": 1,
//	  "next_id": 2000,
//	  "names": {"billing-writer": {"id": 1000, "epoch": 3}}
//	}
//
// Ids of unnamed producers are reserved in blocks of producerIDBlock (next_id moves a block
// at a time), so that they cost one file write per block; a restart skips the rest of the
// block. version must be 1; unknown fields are rejected.
//
// On a cluster the ids come from a ProducerIDBlockSource instead (the controller hands out
// disjoint blocks, so brokers never give two producers the same id): the registry takes ids
// from its current block and asks for the next one when a tenth of it is left. Those blocks
// are not written to the file (the controller's log holds them; a restart skips the rest
// of a block); next_id then stays above every id a name holds, and is sent as the lowest
// id the next block may start at.
//
// On a cluster the names are kept cluster-wide as well, by a ProducerNameSource (the
// controller's replicated map): Init and Resume of a name go to it, and the epochs of the
// cluster's names (SetClusterNames, from every metadata change) fence on this broker's
// partitions, so that a name initialised at another broker fences the producer that holds
// it here. While the source answers ok=false (a cluster not yet finalized at the protocol
// version that keeps names: a rolling upgrade), names stay in the file as on a single
// broker.
const (
	producerIDsFileName = "producer-ids.json"
	producerIDsVersion  = 1
	// producerIDBlock is how many ids one write of the file reserves for unnamed producers.
	producerIDBlock = 1000
	// producerIDsBytesMax bounds the file read at start-up (~100 k names of 255 bytes).
	producerIDsBytesMax = 32 << 20
	// ProducerNameBytesMax bounds a producer name (a transactional.id in Kafka).
	ProducerNameBytesMax = 255
	// producerNamesMax bounds the names remembered, so the file and the map stay bounded.
	producerNamesMax = 100_000
	producerEpochMax = math.MaxInt16 - 1
	// producerIDBlockTimeout bounds one request for a block (the source retries inside it
	// while the controller elects a leader).
	producerIDBlockTimeout = 10 * time.Second
)

// Errors of the producer id registry.
var (
	ErrInvalidProducerName = errors.New("invalid producer name")
	ErrProducerIDsCorrupt  = errors.New("producer id file corrupt")
	ErrTooManyProducers    = errors.New("too many producer names")
	// ErrProducerIDsUnavailable: no block of producer ids could be had from the source.
	ErrProducerIDsUnavailable = errors.New("no producer id block available")
)

// ProducerIDBlockSource reserves a block of producer ids that no other caller, on any
// broker, ever gets: count ids from first, with first >= minID.
type ProducerIDBlockSource func(ctx context.Context, minID int64) (first, count int64, err error)

// ProducerNameSource gives a producer name its next identity cluster-wide (a cluster's
// controller): the name's id with the epoch bumped, or, with keepEpoch, the name's current
// identity as it is (a fresh one for an unknown name). current is the identity the caller
// holds (NoProducer: none); a caller a newer instance has fenced gets an error wrapping
// ErrProducerFenced. ok false: the cluster does not keep names (yet); the registry keeps
// the name in its file.
type ProducerNameSource func(ctx context.Context, name string, current ProducerIdentity, keepEpoch bool) (id ProducerIdentity, ok bool, err error)

// ProducerIdentity is a producer id and epoch.
type ProducerIdentity struct {
	ID    int64 `json:"id"`
	Epoch int16 `json:"epoch"`
}

type producerIDsFile struct {
	Version int                         `json:"version"`
	NextID  int64                       `json:"next_id"`
	Names   map[string]ProducerIdentity `json:"names"`
}

// ProducerIDs is the broker's producer id registry. Safe for concurrent use: Init takes a
// mutex (it writes a file), CurrentEpoch is a lock-free read for the produce path.
type ProducerIDs struct {
	dir string
	fio ring.FileIO // every fsync of the file and the directory

	mu       sync.Mutex
	next     int64 // next id for an unnamed producer; guarded by mu
	reserved int64 // ids below this are reserved (file, or current block); guarded by mu
	saved    int64 // next_id in the file; guarded by mu
	names    map[string]ProducerIdentity

	// With a block source (SetBlockSource), [next, reserved) is the current block and
	// [spareFirst, spareEnd) the one fetched ahead; fetching is closed when the fetch in
	// flight ends (nil: none). All guarded by mu.
	blocks               ProducerIDBlockSource
	spareFirst, spareEnd int64
	fetching             chan struct{}
	fetchErr             error

	// nameSource, when set, keeps names cluster-wide; cluster holds the identities of the
	// cluster's names as last heard (SetClusterNames, or an answer of nameSource). Both
	// guarded by mu; cluster is replaced whole, never written in place.
	nameSource ProducerNameSource
	cluster    map[string]ProducerIdentity

	// epochs maps the id of every named producer to its current epoch. Replaced whole
	// (copy-on-write) under mu; read without a lock by the produce path.
	epochs atomic.Pointer[map[int64]int16]
}

// LoadProducerIDs is OpenProducerIDs with plain system calls.
func LoadProducerIDs(dir string) (*ProducerIDs, error) { return OpenProducerIDs(dir, ring.Syscalls{}) }

// OpenProducerIDs reads dir/producer-ids.json; a missing file is an empty registry. Every
// fsync the registry issues later goes through fio.
func OpenProducerIDs(dir string, fio ring.FileIO) (*ProducerIDs, error) {
	p := &ProducerIDs{dir: dir, fio: fio, names: map[string]ProducerIdentity{}}
	b, err := readBounded(filepath.Join(dir, producerIDsFileName), producerIDsBytesMax)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("load producer ids: %w", err)
	default:
		f, err := decodeProducerIDs(b)
		if err != nil {
			return nil, fmt.Errorf("load producer ids: %w", err)
		}
		p.names, p.next, p.reserved, p.saved = f.Names, f.NextID, f.NextID, f.NextID
	}
	p.publishLocked()
	return p, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s larger than %d bytes", path, limit)
	}
	return b, nil
}

func decodeProducerIDs(b []byte) (producerIDsFile, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f producerIDsFile
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%w: %w", ErrProducerIDsCorrupt, err)
	}
	if dec.More() {
		return f, fmt.Errorf("%w: trailing data", ErrProducerIDsCorrupt)
	}
	if f.Version != producerIDsVersion {
		return f, fmt.Errorf("%w: version %d, want %d", ErrProducerIDsCorrupt, f.Version, producerIDsVersion)
	}
	if f.NextID < 0 || len(f.Names) > producerNamesMax {
		return f, fmt.Errorf("%w: next_id %d, %d names", ErrProducerIDsCorrupt, f.NextID, len(f.Names))
	}
	if f.Names == nil {
		f.Names = map[string]ProducerIdentity{}
	}
	seen := map[int64]bool{}
	for name, id := range f.Names {
		if err := validProducerName(name); err != nil || id.ID < 0 || id.ID >= f.NextID || id.Epoch < 0 || seen[id.ID] {
			return f, fmt.Errorf("%w: name %q holds %+v (next_id %d)", ErrProducerIDsCorrupt, name, id, f.NextID)
		}
		seen[id.ID] = true
	}
	return f, nil
}

func validProducerName(name string) error {
	if name == "" || len(name) > ProducerNameBytesMax {
		return fmt.Errorf("%w: %d bytes, want 1 to %d", ErrInvalidProducerName, len(name), ProducerNameBytesMax)
	}
	if !utf8.ValidString(name) {
		// The registry file is JSON, which keeps text only: an invalid byte would be saved
		// as U+FFFD (three bytes), so the name read back at the next start would differ,
		// and could be too long to load at all.
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidProducerName)
	}
	return nil
}

// SetBlockSource makes the registry take fresh ids from blocks of src (a cluster's
// controller) instead of reserving them in its file. Call it before the first Init.
func (p *ProducerIDs) SetBlockSource(src ProducerIDBlockSource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocks = src
	p.next = p.reserved // ids reserved in the file are not a block of src
}

// ensureBlockLocked makes the current block non-empty, taking the spare block or waiting
// for a fetch (mu is released while it waits).
func (p *ProducerIDs) ensureBlockLocked() error {
	for p.next >= p.reserved {
		if p.spareEnd > p.spareFirst {
			p.next, p.reserved = p.spareFirst, p.spareEnd
			p.spareFirst, p.spareEnd = 0, 0
			continue
		}
		done := p.fetchLocked()
		p.mu.Unlock()
		<-done
		p.mu.Lock()
		if p.next >= p.reserved && p.spareEnd <= p.spareFirst && p.fetchErr != nil {
			return fmt.Errorf("%w: %w", ErrProducerIDsUnavailable, p.fetchErr)
		}
	}
	return nil
}

// prefetchLocked asks for the next block when a tenth of the current one is left.
func (p *ProducerIDs) prefetchLocked() {
	if p.blocks != nil && p.reserved-p.next <= producerIDBlock/10 && p.spareEnd <= p.spareFirst {
		p.fetchLocked()
	}
}

// fetchLocked starts fetching a block into the spare slot unless a fetch is in flight,
// and returns the channel closed when the fetch ends.
func (p *ProducerIDs) fetchLocked() <-chan struct{} {
	if p.fetching != nil {
		return p.fetching
	}
	done := make(chan struct{})
	p.fetching = done
	minID := max(p.saved, p.reserved, p.spareEnd)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), producerIDBlockTimeout)
		first, count, err := p.blocks(ctx, minID)
		cancel()
		if err == nil && (first < minID || count <= 0 || first > math.MaxInt64-count) {
			err = fmt.Errorf("block source answered %d ids from %d (asked from %d)", count, first, minID)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.fetchErr = err
		if err == nil {
			p.spareFirst, p.spareEnd = first, first+count
		}
		p.fetching = nil
		close(done)
	}()
	return done
}

// NoProducer is the identity a producer without one passes to Init.
var NoProducer = ProducerIdentity{ID: -1, Epoch: -1}

// Init hands out a producer identity. An empty name gets a fresh id at epoch 0; a name gets
// its previous id with the epoch bumped (a fresh id at epoch 0 the first time, or when the
// epoch is exhausted). current is the identity the caller holds (NoProducer for a producer
// starting up): a running producer bumping its own epoch after a failed batch (Kafka's
// KIP-360) passes it, and when a newer instance has since taken the name, Init refuses
// with ErrProducerFenced instead of fencing the newer one. The new state is on disk before
// Init returns.
func (p *ProducerIDs) Init(name string, current ProducerIdentity) (ProducerIdentity, error) {
	if id, ok, err := p.fromSource(name, current, false); ok || err != nil {
		return id, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, known := p.names[name]; p.blocks != nil && (name == "" || !known || prev.Epoch >= producerEpochMax) {
		// A fresh id comes from the current block: have one before the names are read
		// below (the wait releases mu).
		if err := p.ensureBlockLocked(); err != nil {
			return ProducerIdentity{}, err
		}
		defer p.prefetchLocked()
	}
	if name == "" {
		if p.next < p.reserved {
			id := ProducerIdentity{ID: p.next}
			p.next++
			return id, nil
		}
		if err := p.saveLocked(p.names, p.next+producerIDBlock); err != nil {
			return ProducerIdentity{}, err
		}
		p.reserved, p.saved = p.next+producerIDBlock, p.next+producerIDBlock
		id := ProducerIdentity{ID: p.next}
		p.next++
		return id, nil
	}
	if err := validProducerName(name); err != nil {
		return ProducerIdentity{}, err
	}
	prev, known := p.names[name]
	if current.ID >= 0 && (!known || prev != current) {
		return ProducerIdentity{}, fmt.Errorf("%w: producer %q holds id %d epoch %d, the name is at %+v", ErrProducerFenced, name, current.ID, current.Epoch, prev)
	}
	if !known && len(p.names) >= producerNamesMax {
		return ProducerIdentity{}, fmt.Errorf("%w: %d names", ErrTooManyProducers, len(p.names))
	}
	next := ProducerIdentity{ID: prev.ID, Epoch: prev.Epoch + 1}
	consumed := int64(0)
	if !known || prev.Epoch >= producerEpochMax {
		next = ProducerIdentity{ID: p.next}
		consumed = 1
	}
	names := make(map[string]ProducerIdentity, len(p.names)+1)
	for k, v := range p.names {
		names[k] = v
	}
	names[name] = next
	reserved := max(p.reserved, p.next+consumed)
	saved := max(p.saved, reserved)
	if err := p.saveLocked(names, saved); err != nil {
		return ProducerIdentity{}, err
	}
	p.names, p.next, p.reserved, p.saved = names, p.next+consumed, reserved, saved
	p.publishLocked()
	return next, nil
}

// Lookup returns the identity a name holds now in the file, without bumping its epoch (ok
// false for a name never initialised there).
func (p *ProducerIDs) Lookup(name string) (id ProducerIdentity, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok = p.names[name]
	return id, ok
}

// Resume returns the identity a name holds now, without bumping its epoch, initialising a
// name that has none (a fresh id at epoch 0): the cluster's when a ProducerNameSource keeps
// names, else the file's. A client that resumes the name's current epoch instead of
// fencing it (the HTTP produce API, which has no producer session) uses it.
func (p *ProducerIDs) Resume(name string) (ProducerIdentity, error) {
	p.mu.Lock()
	id, known := p.cluster[name]
	p.mu.Unlock()
	if known { // the cluster's map holds it: no controller round trip per request
		return id, nil
	}
	if id, ok, err := p.fromSource(name, NoProducer, true); ok || err != nil {
		return id, err
	}
	if id, ok := p.Lookup(name); ok {
		return id, nil
	}
	return p.Init(name, NoProducer)
}

// SetNameSource makes the registry keep names cluster-wide through src (see
// ProducerNameSource). Call it before the first Init.
func (p *ProducerIDs) SetNameSource(src ProducerNameSource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nameSource = src
}

// SetClusterNames merges the identities of the cluster's names (the controller's map, at
// each metadata change): their epochs fence batches from then on. An identity this broker
// was answered more recently than names shows (a newer epoch of the same id, a name names
// lacks) is kept: the controller never forgets a name, so names is a view that lags.
func (p *ProducerIDs) SetClusterNames(names map[string]ProducerIdentity) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make(map[string]ProducerIdentity, max(len(names), len(p.cluster)))
	for name, id := range p.cluster {
		next[name] = id
	}
	for name, id := range names {
		if mine, ok := p.cluster[name]; ok && mine.ID == id.ID && mine.Epoch > id.Epoch {
			id = mine
		}
		next[name] = id
	}
	p.cluster = next
	p.publishLocked()
}

// fromSource asks the name source for name's identity; ok false when there is no source,
// no name, or the source does not keep names.
func (p *ProducerIDs) fromSource(name string, current ProducerIdentity, keepEpoch bool) (ProducerIdentity, bool, error) {
	p.mu.Lock()
	src := p.nameSource
	p.mu.Unlock()
	if src == nil || name == "" {
		return ProducerIdentity{}, false, nil
	}
	if err := validProducerName(name); err != nil {
		return ProducerIdentity{}, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), producerIDBlockTimeout)
	defer cancel()
	id, ok, err := src(ctx, name, current, keepEpoch)
	if err != nil || !ok {
		return ProducerIdentity{}, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make(map[string]ProducerIdentity, len(p.cluster)+1)
	for k, v := range p.cluster {
		next[k] = v
	}
	if mine, known := next[name]; !known || mine.ID != id.ID || mine.Epoch < id.Epoch {
		next[name] = id
	}
	p.cluster = next
	p.publishLocked()
	return id, true, nil
}

// CurrentEpoch returns the current epoch of a named producer's id (ok false for ids that
// belong to no name: their epoch never moves, the partitions' own state fences them).
func (p *ProducerIDs) CurrentEpoch(id int64) (epoch int16, ok bool) {
	m := p.epochs.Load()
	if m == nil {
		return 0, false
	}
	epoch, ok = (*m)[id]
	return epoch, ok
}

func (p *ProducerIDs) publishLocked() {
	m := make(map[int64]int16, len(p.names)+len(p.cluster))
	for _, id := range p.names {
		m[id.ID] = id.Epoch
	}
	for _, id := range p.cluster { // ids of the controller's counter: never a file name's
		m[id.ID] = max(m[id.ID], id.Epoch)
	}
	p.epochs.Store(&m)
}

// saveLocked writes the registry with names and next_id = nextID atomically.
func (p *ProducerIDs) saveLocked(names map[string]ProducerIdentity, nextID int64) error {
	b, err := json.MarshalIndent(producerIDsFile{Version: producerIDsVersion, NextID: nextID, Names: names}, "", "  ")
	if err != nil {
		return fmt.Errorf("save producer ids: %w", err)
	}
	return writeFileAtomic(p.fio, p.dir, producerIDsFileName, append(b, '\n'))
}
