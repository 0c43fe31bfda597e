package ring

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Backend names returned by Ring.Backend.
const (
	BackendUring   = "io_uring"
	BackendSyscall = "syscall"
)

// Sentinel errors callers act on.
var (
	// ErrSQFull: no free submission slot even after flushing; reap completions and retry.
	ErrSQFull = errors.New("ring: submission queue full")
	// ErrUnsupported: the backend or kernel lacks an op or feature (the message names it).
	ErrUnsupported = errors.New("ring: unsupported")
	// ErrClosed: the ring or reactor is closed.
	ErrClosed = errors.New("ring: closed")
	// ErrMailboxFull: a reactor's mailbox is full; back off and retry (back-pressure).
	ErrMailboxFull = errors.New("ring: reactor mailbox full")
	// ErrTooManyInflight: the reactor's in-flight op limit is reached.
	ErrTooManyInflight = errors.New("ring: too many in-flight ops")
	// ErrArenaExhausted: every arena buffer is handed out.
	ErrArenaExhausted = errors.New("ring: buffer arena exhausted")
	// ErrWrongThread: a reactor method that needs the owning thread was called elsewhere.
	ErrWrongThread = errors.New("ring: called off the reactor's owning thread")
)

// Ring is one submission/completion queue pair: io_uring, or the syscall backend that
// interprets the same SQEs. A Ring is owned by one thread; only Fd (for MSG_RING) and the
// msg_ring target side are safe across threads.
type Ring interface {
	// GetSQE returns the next free SQE, or nil when the SQ is full (call Submit first).
	GetSQE() *SQE
	// Submit hands every SQE obtained since the last submit to the kernel.
	Submit() (int, error)
	// SubmitAndWait submits, then waits until waitNr completions are available or timeout
	// elapses (timeout <= 0: no timeout). A timeout is not an error.
	SubmitAndWait(waitNr uint32, timeout time.Duration) (int, error)
	// PeekCQEs copies up to len(dst) available completions into dst and consumes them.
	// It never blocks; it flushes kernel-side overflow when the CQ was full.
	PeekCQEs(dst []CQE) int
	// SQSpace is the number of SQEs GetSQE can still hand out.
	SQSpace() int
	RegisterBuffers(bufs [][]byte) error
	// RegisterBuffersSparse registers an empty fixed-buffer table of n slots (Linux 5.19);
	// UpdateBuffers fills slots from offset on (a nil or empty buffer clears its slot).
	RegisterBuffersSparse(n uint32) error
	UpdateBuffers(offset uint32, bufs [][]byte) error
	UnregisterBuffers() error
	RegisterFiles(fds []int32) error
	UpdateFiles(offset uint32, fds []int32) error
	UnregisterFiles() error
	RegisterEventfd(fd int) error
	// RegisterBufRing / UnregisterBufRing manage provided-buffer rings (see BufRing).
	RegisterBufRing(group uint16, ringMem []byte, entries uint16) error
	UnregisterBufRing(group uint16) error
	UnregisterEventfd() error
	// Probe reports which ops and features this backend supports.
	Probe() *Probe
	// Fd is the descriptor other rings target with PrepMsgRing.
	Fd() int
	// Backend is BackendUring or BackendSyscall.
	Backend() string
	Close() error
}

// Config sets up a ring. The zero value is valid (256 entries, no special flags, auto).
type Config struct {
	Entries   uint32 // SQ size, rounded up to a power of two (default 256, max 32768)
	CQEntries uint32 // CQ size (default 2*Entries)
	// SQPoll starts a kernel thread that polls the SQ (burns a core; measure before use).
	SQPoll     bool
	SQPollIdle time.Duration // idle time before the SQ thread sleeps (default 1 s)
	// SingleIssuer (6.0) promises that only the thread that created the ring submits.
	SingleIssuer bool
	// DeferTaskrun (6.1, needs SingleIssuer) runs completion work only when the owner
	// waits for completions: fewer interrupts, but only the owner can reap.
	DeferTaskrun bool
	// CoopTaskrun (5.19) stops the kernel from interrupting the task for completion work.
	CoopTaskrun bool
	// Backend is "auto" (default; io_uring when it works), "uring" (error if not) or
	// "syscall". With "auto", the environment variable RINGLOG_IO=syscall (or =uring)
	// decides instead; an explicit "uring" or "syscall" wins over the environment.
	Backend string
	// RequireOps lists ops the caller cannot work without: Open fails (or, on "auto",
	// falls back to the syscall backend) naming the first missing one.
	RequireOps []Opcode

	// Reactor settings (ignored by Open).
	MailboxEntries uint32 // Post mailbox capacity (default 4096)
	// InlineFileIO makes the reactor's FileIO methods issue pread/pwrite/fdatasync directly
	// on the owning thread instead of through the ring. Both block; through io_uring a
	// buffered ext4 write is handed to an io-wq worker (no NOWAIT support), which costs a
	// context switch per op (see docs/ring.md for numbers). Async ops are unaffected.
	InlineFileIO bool
	InflightMax  int // in-flight op limit per reactor (default 65536)
	// SpinBeforeWait: after a loop turn that did work, the loop polls its completion queue
	// and mailbox this long before it sleeps in the kernel (0: it sleeps at once). A request
	// that arrives within it is served without the thread's sleep and wake-up; the price is
	// up to this much CPU after every burst of work. At most SpinBeforeWaitMax.
	SpinBeforeWait time.Duration
	Now            func() time.Time // clock for AfterFunc (default time.Now); tests inject one
	// HideOps lists ops the reactor's Probe reports missing, and refuses, though the kernel
	// has them: a caller's fallback for an older kernel can then be tested on a new one.
	HideOps []Opcode
}

// SpinBeforeWaitMax bounds Config.SpinBeforeWait: a spin is meant to bridge one request's
// round trip, not to replace sleeping.
const SpinBeforeWaitMax = time.Millisecond

const (
	entriesDefault    = 256
	entriesMax        = 32768
	sqPollIdleDefault = time.Second
)

func (c Config) withDefaults() Config {
	if c.Entries == 0 {
		c.Entries = entriesDefault
	}
	if c.Entries > entriesMax {
		c.Entries = entriesMax
	}
	c.Entries = roundPow2(c.Entries)
	if c.CQEntries == 0 {
		c.CQEntries = 2 * c.Entries
	}
	if c.CQEntries < c.Entries {
		c.CQEntries = c.Entries
	}
	c.CQEntries = roundPow2(c.CQEntries)
	if c.SQPollIdle == 0 {
		c.SQPollIdle = sqPollIdleDefault
	}
	c.SpinBeforeWait = min(max(c.SpinBeforeWait, 0), SpinBeforeWaitMax)
	if c.Backend == "" {
		c.Backend = "auto"
	}
	return c
}

func roundPow2(v uint32) uint32 {
	n := uint32(1)
	for n < v {
		n <<= 1
	}
	return n
}

// EnvBackend is the environment variable that forces a backend ("syscall" or "uring").
const EnvBackend = "RINGLOG_IO"

// Open creates a ring with cfg. With Backend "auto" it probes io_uring: on EINVAL it retries
// with fewer optional flags; on EPERM, ENOSYS or EACCES (seccomp, kernel.io_uring_disabled,
// old kernel) or a missing required op it uses the syscall backend. The choice and its
// reason are logged once per process (log/slog).
func Open(cfg Config) (Ring, error) {
	cfg = cfg.withDefaults()
	backend := cfg.Backend
	reason := "config Backend=" + backend
	if env := strings.TrimSpace(os.Getenv(EnvBackend)); env != "" && backend == "auto" {
		switch env {
		case "syscall", "uring", "io_uring":
			backend = strings.TrimPrefix(env, "io_")
			reason = EnvBackend + "=" + env
		default:
			return nil, fmt.Errorf("ring: %s=%q: want syscall or uring", EnvBackend, env)
		}
	}
	switch backend {
	case "syscall":
		r, err := newSysRing(cfg)
		if err != nil {
			return nil, err
		}
		logChoice(BackendSyscall, "forced by "+reason)
		return r, nil
	case "uring", "auto":
	default:
		return nil, fmt.Errorf("ring: Config.Backend %q: want auto, uring or syscall", backend)
	}
	r, dropped, err := openUringWithRetry(cfg)
	if err == nil {
		err = checkRequired(r.Probe(), cfg.RequireOps)
		if err != nil {
			r.Close()
		}
	}
	if err == nil {
		why := "io_uring available"
		if dropped != "" {
			why += "; setup flags dropped after EINVAL: " + dropped
		}
		logChoice(BackendUring, why)
		return r, nil
	}
	if backend == "uring" || !fallbackWorthy(err) {
		return nil, err
	}
	s, serr := newSysRing(cfg)
	if serr != nil {
		return nil, fmt.Errorf("%v; syscall backend: %w", err, serr)
	}
	logChoice(BackendSyscall, "io_uring unusable: "+err.Error())
	return s, nil
}

func fallbackWorthy(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EACCES) ||
		errors.Is(err, ErrUnsupported)
}

func checkRequired(p *Probe, ops []Opcode) error {
	for _, op := range ops {
		if !p.Supported(op) {
			return fmt.Errorf("%w: op %s (needs Linux %s) on backend %s", ErrUnsupported, op, op.MinKernel(), p.Backend)
		}
	}
	return nil
}

// uringSetup creates an io_uring ring; tests replace it to simulate old or locked-down kernels.
var uringSetup = newUringRing

// openUringWithRetry tries the wanted setup flags, dropping optional ones on EINVAL (an
// older kernel rejecting a flag it does not know), newest first.
func openUringWithRetry(cfg Config) (*uringRing, string, error) {
	if err := uringDisabledBySysctl(); err != nil {
		return nil, "", err
	}
	var dropped []string
	for attempt := 0; attempt < 8; attempt++ {
		r, err := uringSetup(cfg)
		if err == nil {
			return r, strings.Join(dropped, ","), nil
		}
		if !errors.Is(err, unix.EINVAL) && !(errors.Is(err, unix.EPERM) && cfg.SQPoll) {
			return nil, "", err
		}
		switch {
		case cfg.DeferTaskrun:
			cfg.DeferTaskrun = false
			dropped = append(dropped, "DEFER_TASKRUN")
		case cfg.CoopTaskrun:
			cfg.CoopTaskrun = false
			dropped = append(dropped, "COOP_TASKRUN")
		case cfg.SingleIssuer:
			cfg.SingleIssuer = false
			dropped = append(dropped, "SINGLE_ISSUER")
		case cfg.SQPoll:
			cfg.SQPoll = false
			dropped = append(dropped, "SQPOLL")
		default:
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("ring: io_uring setup kept failing")
}

// uringDisabledBySysctl reads kernel.io_uring_disabled (6.6+): 2 means nobody may create a
// ring. 1 (group-restricted) is left to io_uring_setup to answer with EPERM.
func uringDisabledBySysctl() error {
	b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled")
	if err != nil {
		return nil
	}
	if strings.TrimSpace(string(b)) == "2" {
		return fmt.Errorf("ring: io_uring disabled by sysctl kernel.io_uring_disabled=2: %w", unix.EPERM)
	}
	return nil
}

var (
	logMu     sync.Mutex
	logLogged = map[string]bool{}
)

// logChoice logs each distinct (backend, reason) once per process.
func logChoice(backend, reason string) {
	logMu.Lock()
	defer logMu.Unlock()
	key := backend + "|" + reason
	if logLogged[key] {
		return
	}
	logLogged[key] = true
	slog.Info("ring: I/O backend selected", "backend", backend, "reason", reason)
}

// Probe reports the ops and features a backend supports.
type Probe struct {
	Backend  string
	Features uint32 // FeatXxx bits (io_uring only)
	LastOp   Opcode
	ops      [probeOpsCapacity]bool
}

// Supported reports whether op is available.
func (p *Probe) Supported(op Opcode) bool { return p != nil && p.ops[op] }

// Require returns an ErrUnsupported error naming the first op in ops that is missing.
func (p *Probe) Require(ops ...Opcode) error { return checkRequired(p, ops) }

// HasFeature reports whether every bit in feat is set.
func (p *Probe) HasFeature(feat uint32) bool { return p.Features&feat == feat }

// String lists the supported ops.
func (p *Probe) String() string {
	var b strings.Builder
	b.WriteString(p.Backend)
	b.WriteString(":")
	for i, ok := range p.ops {
		if ok {
			b.WriteString(" ")
			b.WriteString(Opcode(i).String())
		}
	}
	return b.String()
}
