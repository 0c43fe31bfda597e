package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrBadResult is returned for a result file that does not parse.
var ErrBadResult = errors.New("bad result file")

// resultFileBytesMax bounds a result file read by compare; a 1-hour run sampled every second
// is well under 2 MiB.
const resultFileBytesMax = 64 << 20

// Result is one run's JSON file.
type Result struct {
	Workload       Workload   `json:"workload"`
	Driver         DriverInfo `json:"driver"`
	Hardware       Hardware   `json:"hardware"`
	Started        time.Time  `json:"started"`
	WarmupSeconds  float64    `json:"warmup_seconds"`
	TestSeconds    float64    `json:"test_seconds"`
	Publish        Throughput `json:"publish"`
	Consume        Throughput `json:"consume"`
	PublishLatency Summary    `json:"publish_latency"`
	// PublishLatencyIntended is ack − intended send time: what an application on the
	// schedule waited (coordinated-omission corrected).
	PublishLatencyIntended Summary  `json:"publish_latency_intended"`
	PublishDelay           Summary  `json:"publish_delay"`
	EndToEnd               Summary  `json:"end_to_end_latency"`
	Backlog                *Backlog `json:"backlog,omitempty"`
	BrokerRSS              RSSStats `json:"broker_rss"`
	BrokerCPU              CPUStats `json:"broker_cpu"`
	LoopbackMBps           float64  `json:"loopback_mb_per_s,omitempty"`
	// PartitionShares is each partition index's share of all messages sent (over the whole
	// run, summed over topics): what the key distribution did.
	PartitionShares []float64 `json:"partition_shares,omitempty"`
	Samples         []Sample  `json:"samples"`
	Notes           []string  `json:"notes,omitempty"`
	Version         string    `json:"format"`
	Command         string    `json:"command,omitempty"`
	Errors          ErrCounts `json:"errors"`
	// Totals counts the whole run, warm-up, backlog and the drain after the window
	// included: the messages acknowledged to the producers and those the consumers read.
	Totals Totals `json:"totals"`
}

// Totals are whole-run message counts (see Result.Totals).
type Totals struct {
	Published int64 `json:"published"`
	Consumed  int64 `json:"consumed"`
}

// AllDelivered reports whether the consumers read at least every message the producers had
// acknowledged by the end of the run (the drain included); a workload with no consumers
// delivers nothing and reports false.
func (r *Result) AllDelivered() bool {
	return r.Workload.Consumers > 0 && r.Totals.Published > 0 && r.Totals.Consumed >= r.Totals.Published
}

// resultFormat versions the JSON layout.
const resultFormat = "ringlog-bench-result/1"

// Throughput over the measured window.
type Throughput struct {
	Messages  int64   `json:"messages"`
	Bytes     int64   `json:"bytes"`
	MsgPerSec float64 `json:"msg_per_s"`
	MBPerSec  float64 `json:"mb_per_s"` // 10^6 bytes per second
}

// ErrCounts are failures the run saw.
type ErrCounts struct {
	Publish     int64 `json:"publish"`
	BadPayloads int64 `json:"bad_payloads"`
}

// Backlog reports a catch-up run: the backlog written before consumers started, how long
// they took to read it, and when they first caught up with the live head.
type Backlog struct {
	TargetBytes         int64   `json:"target_bytes"`
	WrittenBytes        int64   `json:"written_bytes"`
	WrittenMessages     int64   `json:"written_messages"`
	FillSeconds         float64 `json:"fill_seconds"`
	BacklogReadSeconds  float64 `json:"backlog_read_seconds"` // consumers read the whole backlog
	BacklogReadMBPerSec float64 `json:"backlog_read_mb_per_s"`
	CaughtUpSeconds     float64 `json:"caught_up_seconds"` // lag first under 100 ms of production
	// BrokerCPUSeconds is the broker's CPU while the consumers read the backlog (the live
	// producers' writes in that time included); BrokerCPUPerGB divides it by the backlog.
	BrokerCPUSeconds float64 `json:"broker_cpu_seconds,omitempty"`
	BrokerCPUPerGB   float64 `json:"broker_cpu_per_gb,omitempty"`
	Drained          bool    `json:"drained"`
}

// Sample is one point of the time series (rates over the preceding interval).
type Sample struct {
	Seconds        float64 `json:"t"`
	Warmup         bool    `json:"warmup,omitempty"`
	PublishMsgPerS float64 `json:"pub_msg_s"`
	PublishMBPerS  float64 `json:"pub_mb_s"`
	ConsumeMsgPerS float64 `json:"con_msg_s"`
	ConsumeMBPerS  float64 `json:"con_mb_s"`
	LagMessages    int64   `json:"lag_msgs"`
	BrokerRSSBytes int64   `json:"rss_bytes,omitempty"`
}

// RSSStats summarises the broker's resident set over the measured window.
type RSSStats struct {
	PID         int    `json:"pid,omitempty"`
	Source      string `json:"source"`
	FirstBytes  int64  `json:"first_bytes"`
	LastBytes   int64  `json:"last_bytes"`
	MaxBytes    int64  `json:"max_bytes"`
	GrowthBytes int64  `json:"growth_bytes"`
}

// ReadRSS returns a process's resident set size from /proc/PID/status.
func ReadRSS(pid int) (int64, error) {
	kib, err := readProcInt(pid, "status", "VmRSS:", " kB")
	return kib << 10, err
}

// readProcInt returns the integer on the line of /proc/PID/FILE that starts with key,
// without unit (a suffix such as " kB").
func readProcInt(pid int, file, key, unit string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0, fmt.Errorf("read %s of %d: %w", file, pid, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), unit), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s of %d: %w", strings.TrimSuffix(key, ":"), pid, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s for %d", strings.TrimSuffix(key, ":"), pid)
}

// WriteJSON writes r to path.
func (r *Result) WriteJSON(path string) error { return writeJSONFile(path, "result", r) }

// writeJSONFile writes v to path, indented; what names it in errors.
func writeJSONFile(path, what string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", what, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// LoadResult reads a result file.
func LoadResult(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load result: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, resultFileBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("load result %s: %w", path, err)
	}
	if len(data) > resultFileBytesMax {
		return nil, fmt.Errorf("%w: %s larger than %d bytes", ErrBadResult, path, resultFileBytesMax)
	}
	r, err := DecodeResult(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// DecodeResult parses a result file's bytes and checks its format version.
func DecodeResult(data []byte) (*Result, error) {
	if len(data) > resultFileBytesMax {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadResult, resultFileBytesMax)
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadResult, err)
	}
	if r.Version != resultFormat {
		return nil, fmt.Errorf("%w: format %q, want %q", ErrBadResult, r.Version, resultFormat)
	}
	return &r, nil
}
