package bench

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sort"
	"sync"
)

// ErrNotImplemented is returned by a driver slot whose client does not exist yet.
var ErrNotImplemented = errors.New("driver not implemented")

// Driver connects the framework to one system under test. A driver owns its clients and, for
// an embedded peer, the server; Close releases all of it.
type Driver interface {
	// Info names the system and how it stores data, for the result file.
	Info() DriverInfo
	CreateTopic(ctx context.Context, name string, partitions int) error
	NewProducer(ctx context.Context, topic string, opts ProducerOptions) (Producer, error)
	// NewConsumer reads the given partitions of topic from their first offset.
	NewConsumer(ctx context.Context, topic string, partitions []int) (Consumer, error)
	Close() error
}

// DriverInfo is what a result records about the system under test.
type DriverInfo struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	StorageMode string `json:"storage_mode"` // e.g. "page-cache", "direct", "file (sync_interval always)"
	IOBackend   string `json:"io_backend"`   // e.g. "io_uring", "syscalls", "go runtime"
	BrokerPID   int    `json:"broker_pid,omitempty"`
	Address     string `json:"address,omitempty"`
}

// ProducerOptions carry the workload's producer settings to a driver.
type ProducerOptions struct {
	Acks        string // "0", "1", "all"
	Compression string // "none", "zstd"
	Durability  string // "none", "fsync"
	MaxInFlight int
	BatchBytes  int // the producer's batch size; 0 = the client's default
	// ClientPlacesNullKeys: every Send of this producer has partition -1 and a nil key,
	// and the client places the record with its own partitioner (only for a driver that
	// is a NullKeyPlacer).
	ClientPlacesNullKeys bool
}

// NullKeyPlacer is a Driver whose clients place null-key records themselves, as a Kafka
// producer's default partitioner does: with keyDistribution none the runner opens its
// producers with ClientPlacesNullKeys and sends with partition -1.
type NullKeyPlacer interface {
	PlacesNullKeys() bool
}

// Producer sends asynchronously. Send may block for back-pressure but must not wait for the
// acknowledgement; done is called exactly once per accepted message, from any goroutine.
// value is only valid until Send returns unless the driver copies it. partition is -1 only
// for a producer opened with ClientPlacesNullKeys.
type Producer interface {
	Send(partition int, key, value []byte, done func(error)) error
	// Flush waits until every accepted message's done has been called.
	Flush(ctx context.Context) error
	Close() error
}

// Consumer polls. Poll blocks until at least one message arrives or ctx ends, and calls
// handle for each message received; value is only valid during the call.
type Consumer interface {
	Poll(ctx context.Context, handle func(partition int, value []byte)) error
	Close() error
}

// BatchConsumer is a Consumer whose client hands records over a batch at a time. The runner
// prefers PollBatches to Poll: it accounts per batch (one add to each counter, one
// end-to-end latency sample: the batch's first record), so what the harness does per
// message is only the payload check. PollBatches blocks like Poll and calls handle once per
// batch; values yields the batch's record values in order and is valid only during handle.
type BatchConsumer interface {
	Consumer
	PollBatches(ctx context.Context, handle func(partition int, values iter.Seq[[]byte])) error
}

// DriverFactory opens a driver for an address (may be empty for embedded peers).
type DriverFactory func(address string, w Workload) (Driver, error)

var (
	driversMu sync.Mutex // guards drivers
	drivers   = map[string]DriverFactory{}
)

// RegisterDriver makes a driver available by name to `ringlog bench run --driver`.
func RegisterDriver(name string, factory DriverFactory) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[name]; dup {
		panic("bench: driver registered twice: " + name)
	}
	drivers[name] = factory
}

// OpenDriver opens a registered driver.
func OpenDriver(name, address string, w Workload) (Driver, error) {
	driversMu.Lock()
	factory, ok := drivers[name]
	driversMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown driver %q (have %v)", name, DriverNames())
	}
	return factory(address, w)
}

// DriverNames lists registered drivers.
func DriverNames() []string {
	driversMu.Lock()
	defer driversMu.Unlock()
	names := make([]string, 0, len(drivers))
	for name := range drivers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
