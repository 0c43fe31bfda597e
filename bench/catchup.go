package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Catch-up rounds knobs.
const (
	catchUpReadTimeout     = 3 * time.Minute // one read of the whole backlog
	catchUpLoopbackMinimum = time.Second     // shortest loopback window
	catchUpPollInterval    = time.Millisecond
)

// CatchUpOptions configure CatchUpRounds. Of the workload only the topic layout, message
// size, producers, consumers and backlogSize matter: there is no live producer.
type CatchUpOptions struct {
	Workload  Workload
	Driver    Driver
	Rounds    int // ≥ 1
	BrokerPID int // overrides the driver's PID for CPU and disk-read sampling
	Progress  *ProgressLine
	// Loopback measures loopback TCP for a window and returns 10^6 B/s; nil measures one
	// stream with LoopbackBandwidth (one consumer connection's ceiling).
	Loopback func(ctx context.Context, window time.Duration) (float64, error)
	// AfterFill runs once the backlog is written, before the first round (the CLI writes
	// dirty pages back there, so no round shares the CPU with the backlog's writeback).
	AfterFill func() error
}

// CatchUpRound is one round: a fresh set of consumers reads the whole backlog from the first
// offset, and loopback TCP is measured right before or right after, over a window as long as
// the read.
type CatchUpRound struct {
	ReadFirst        bool    `json:"read_first"`
	ReadSeconds      float64 `json:"read_seconds"`
	ReadMBPerSec     float64 `json:"read_mb_per_s"`
	LoopbackSeconds  float64 `json:"loopback_seconds"`
	LoopbackMBPerSec float64 `json:"loopback_mb_per_s"`
	Share            float64 `json:"share"` // ReadMBPerSec / LoopbackMBPerSec
	// BrokerCPUPerGB is the broker's CPU-seconds during the read per 10^9 bytes of backlog.
	BrokerCPUPerGB float64 `json:"broker_cpu_per_gb,omitempty"`
	// ClientCPUPerGB is this process's CPU-seconds during the read per 10^9 bytes of
	// backlog: the consumers' (receive, CRC, decode) and the harness's per-batch accounting.
	// With the mem driver the broker is this process and it equals BrokerCPUPerGB.
	ClientCPUPerGB float64 `json:"client_cpu_per_gb,omitempty"`
	// BrokerDiskReadBytes is the broker's read_bytes (/proc/PID/io) during the read: bytes it
	// caused to be read from the block device; 0 means the backlog was served from the page
	// cache. -1 when unreadable.
	BrokerDiskReadBytes int64 `json:"broker_disk_read_bytes"`
}

// CatchUpReport is the result of CatchUpRounds.
type CatchUpReport struct {
	Workload               Workload       `json:"workload"`
	Driver                 DriverInfo     `json:"driver"`
	Hardware               Hardware       `json:"hardware"`
	Started                time.Time      `json:"started"`
	Backlog                Backlog        `json:"backlog"`
	Rounds                 []CatchUpRound `json:"rounds"`
	MedianShare            float64        `json:"median_share"`
	MedianReadMBPerSec     float64        `json:"median_read_mb_per_s"`
	MedianLoopbackMBPerSec float64        `json:"median_loopback_mb_per_s"`
}

// CatchUpRounds fills the workload's backlog once, then Rounds times reads all of it with new
// consumers from the first offset and measures loopback TCP over a window of the read's
// length, alternating which goes first: the read first in even rounds (the window is that
// read's length), loopback first in odd ones (the previous read's length). Each round's share
// is its read rate over its own loopback figure; the report gives the medians.
func CatchUpRounds(ctx context.Context, opts CatchUpOptions) (*CatchUpReport, error) {
	if opts.Rounds < 1 {
		return nil, fmt.Errorf("catch-up rounds: want at least 1 round, got %d", opts.Rounds)
	}
	if opts.Workload.BacklogSize <= 0 || opts.Workload.Consumers < 1 || opts.Workload.Producers < 1 {
		return nil, errors.New("catch-up rounds: the workload needs a backlogSize, producers and consumers")
	}
	if opts.Loopback == nil {
		opts.Loopback = func(ctx context.Context, window time.Duration) (float64, error) {
			return LoopbackBandwidth(ctx, window, 1)
		}
	}
	r, err := newRun(RunOptions{Workload: opts.Workload, Driver: opts.Driver, BrokerPID: opts.BrokerPID, Progress: opts.Progress})
	if err != nil {
		return nil, err
	}
	report := &CatchUpReport{Workload: r.w, Hardware: DetectHardware(r.opts.DataDir), Started: time.Now().UTC()}
	if err := r.createTopics(ctx); err != nil {
		return nil, err
	}
	report.Driver = r.opts.Driver.Info()
	if opts.BrokerPID != 0 {
		report.Driver.BrokerPID = opts.BrokerPID
	}
	if err := r.fillOnce(ctx); err != nil {
		return nil, err
	}
	report.Backlog = *r.backlog
	if opts.AfterFill != nil {
		if err := opts.AfterFill(); err != nil {
			return nil, fmt.Errorf("after the backlog fill: %w", err)
		}
	}
	var lastRead time.Duration
	for i := range opts.Rounds {
		round := CatchUpRound{ReadFirst: i%2 == 0}
		loopback := func(window time.Duration) error {
			window = max(window, catchUpLoopbackMinimum)
			mbps, err := opts.Loopback(ctx, window)
			if err != nil {
				return fmt.Errorf("round %d: %w", i+1, err)
			}
			round.LoopbackSeconds, round.LoopbackMBPerSec = window.Seconds(), mbps
			return nil
		}
		if !round.ReadFirst {
			if err := loopback(lastRead); err != nil {
				return nil, err
			}
		}
		read, err := r.readBacklog(ctx, &round)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", i+1, err)
		}
		lastRead = read
		if round.ReadFirst {
			if err := loopback(read); err != nil {
				return nil, err
			}
		}
		if round.LoopbackMBPerSec > 0 {
			round.Share = round.ReadMBPerSec / round.LoopbackMBPerSec
		}
		report.Rounds = append(report.Rounds, round)
		if opts.Progress != nil {
			opts.Progress.Printf("round %d/%d: read %.0f MB/s, loopback %.0f MB/s, %.0f %%",
				i+1, opts.Rounds, round.ReadMBPerSec, round.LoopbackMBPerSec, round.Share*100)
		}
	}
	if opts.Progress != nil {
		opts.Progress.Done()
	}
	var shares, reads, loopbacks []float64
	for _, round := range report.Rounds {
		shares = append(shares, round.Share)
		reads = append(reads, round.ReadMBPerSec)
		loopbacks = append(loopbacks, round.LoopbackMBPerSec)
	}
	report.MedianShare, report.MedianReadMBPerSec, report.MedianLoopbackMBPerSec = Median(shares), Median(reads), Median(loopbacks)
	return report, nil
}

// fillOnce writes the backlog with the workload's producers and closes them.
func (r *run) fillOnce(ctx context.Context) error {
	producers, err := r.openProducers(ctx)
	if err != nil {
		return err
	}
	fillErr := r.fillBacklog(ctx, producers)
	for _, p := range producers {
		if err := p.Close(); err != nil && fillErr == nil {
			fillErr = fmt.Errorf("close producer: %w", err)
		}
	}
	return fillErr
}

// readBacklog opens the workload's consumers from the first offset and waits until they
// have read the whole backlog; it fills round's read figures and returns the read's length.
func (r *run) readBacklog(ctx context.Context, round *CatchUpRound) (time.Duration, error) {
	r.totals.consumed.Store(0)
	r.totals.consumedBytes.Store(0)
	r.totals.badPayloads.Store(0)
	r.backlogAt.Store(0)
	r.caughtUp.Store(0)
	r.backlogCPUEnd.Store(0)
	r.backlogBenchCPUEnd.Store(0)
	r.consumers = nil
	r.backlogMsg = r.backlog.WrittenMessages
	consumers, err := r.openConsumers(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, c := range consumers {
			_ = c.Close()
		}
	}()
	r.backlogCPUPID, _ = r.brokerPID()
	disk0, diskErr := ReadDiskReadBytes(r.backlogCPUPID)
	readCtx, stop := context.WithTimeout(ctx, catchUpReadTimeout)
	defer stop()
	errs := make(chan error, len(consumers))
	var wg sync.WaitGroup
	r.consumeAt = time.Now()
	r.backlogCPU = startCPU(r.backlogCPUPID)
	for i, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.consume(readCtx, c, r.consumers[i]); err != nil {
				errs <- err
			}
		}()
	}
	ticker := time.NewTicker(catchUpPollInterval)
	defer ticker.Stop()
	var waitErr error
	for r.backlogAt.Load() == 0 && waitErr == nil {
		select {
		case <-readCtx.Done():
			waitErr = fmt.Errorf("read %d of %d backlog messages before %w", r.totals.consumed.Load(), r.backlogMsg, readCtx.Err())
		case err := <-errs:
			waitErr = fmt.Errorf("consumer: %w", err)
		case <-ticker.C:
		}
	}
	stop()
	wg.Wait()
	if waitErr != nil {
		return 0, waitErr
	}
	if bad := r.totals.badPayloads.Load(); bad != 0 {
		return 0, fmt.Errorf("%d bad payloads in the backlog", bad)
	}
	read := time.Duration(r.backlogAt.Load())
	round.ReadSeconds = read.Seconds()
	round.ReadMBPerSec = float64(r.backlog.WrittenBytes) / read.Seconds() / 1e6
	if end := math.Float64frombits(r.backlogCPUEnd.Load()); end > 0 && r.backlogCPU.ok {
		round.BrokerCPUPerGB = (end - r.backlogCPU.broker0) / (float64(r.backlog.WrittenBytes) / 1e9)
	}
	if end := math.Float64frombits(r.backlogBenchCPUEnd.Load()); end > 0 && r.backlogCPU.ok {
		round.ClientCPUPerGB = (end - r.backlogCPU.bench0) / (float64(r.backlog.WrittenBytes) / 1e9)
	}
	round.BrokerDiskReadBytes = -1
	if disk1, err := ReadDiskReadBytes(r.backlogCPUPID); err == nil && diskErr == nil {
		round.BrokerDiskReadBytes = disk1 - disk0
	}
	return read, nil
}

// ReadDiskReadBytes returns read_bytes of a process from /proc/PID/io: the bytes its reads
// (its threads', io_uring's workers included) fetched from block devices, not from the page
// cache. Reading another user's process needs privilege.
func ReadDiskReadBytes(pid int) (int64, error) {
	return readProcInt(pid, "io", "read_bytes:", "")
}

// WriteJSON writes the report to path.
func (c *CatchUpReport) WriteJSON(path string) error {
	return writeJSONFile(path, "catch-up report", c)
}

// Median is the middle value (the mean of the two middle ones for an even count); 0 for none.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
