package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, which Linux fixes at
// 100 for user space on every architecture it exports /proc for.
const userHZ = 100

// CPUStats is the CPU time the broker and the benchmark process spent over the measured
// window, and the broker's CPU-seconds per gigabyte (10^9 bytes) of record payload.
type CPUStats struct {
	PID    int    `json:"pid,omitempty"`
	Source string `json:"source"`
	// BrokerSeconds is user + system CPU of PID over the window.
	BrokerSeconds float64 `json:"broker_seconds"`
	// BenchSeconds is this benchmark process's own CPU (its producers and consumers); it is
	// the same process as the broker with the in-process drivers.
	BenchSeconds float64 `json:"bench_seconds"`
	// PerGBIngested and PerGBServed divide all of the broker's CPU by the bytes published
	// and by the bytes consumed; in a workload that does both each is an upper bound, and
	// PerGBMoved divides it by their sum.
	PerGBIngested float64 `json:"per_gb_ingested,omitempty"`
	PerGBServed   float64 `json:"per_gb_served,omitempty"`
	PerGBMoved    float64 `json:"per_gb_moved,omitempty"`
}

// ReadCPUSeconds returns user + system CPU seconds of a process: from its process CPU
// clock, to the nanosecond, or from /proc/PID/stat, in 10 ms ticks, where that clock
// cannot be read. Ticks are too coarse for a short window: a floor server that used 20 ms
// of CPU in 0.3 s read as 2 ticks (±50 %), or as none, which failed TestBenchFloor on a
// loaded machine.
func ReadCPUSeconds(pid int) (float64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("read cpu of %d: not a process id", pid)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err == nil {
		return float64(ts.Nano()) / 1e9, nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu of %d: %w", pid, err)
	}
	return parseStatCPU(string(data))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a /proc/PID/stat line. The
// command name (field 2) may hold spaces and parentheses, so fields are counted from the
// last ')'.
func parseStatCPU(stat string) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("parse /proc stat: no command name")
	}
	// After ") " come field 3 (state) onwards: utime is the 12th of those, stime the 13th.
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("parse /proc stat: %d fields after the command name, want ≥ 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("parse /proc stat: bad tick count %q", f)
		}
		ticks += n
	}
	return float64(ticks) / userHZ, nil
}

// processCPUClock is clock_getcpuclockid(pid): the id of the clock that counts the CPU
// time of all of pid's threads, live and exited (the scheduler's sum, which utime + stime
// add up to), as include/linux/posix-timers.h builds it: ^pid << 3 | CPUCLOCK_SCHED (2).
// Linux lets any process read another's (clock_gettime checks no permission for it).
func processCPUClock(pid int) int32 { return int32(^pid<<3 | 2) }

// benchCPUSeconds reads this process's CPU time; when the broker is this process (the mem
// driver) it is the broker's reading, so that two reads a clock tick apart never differ.
func benchCPUSeconds(brokerPID int, brokerSeconds float64) (float64, error) {
	if brokerPID == os.Getpid() {
		return brokerSeconds, nil
	}
	return ReadCPUSeconds(os.Getpid())
}

// cpuWindow holds CPU readings at the window's start.
type cpuWindow struct {
	broker0, bench0 float64
	ok              bool
}

func startCPU(pid int) cpuWindow {
	broker, err := ReadCPUSeconds(pid)
	if err != nil {
		return cpuWindow{}
	}
	bench, err := benchCPUSeconds(pid, broker)
	if err != nil {
		return cpuWindow{}
	}
	return cpuWindow{broker0: broker, bench0: bench, ok: true}
}

// finish reads the window's end and fills the per-gigabyte figures from the bytes moved.
func (c cpuWindow) finish(pid int, source string, ingested, served int64) CPUStats {
	stats := CPUStats{PID: pid, Source: source}
	if !c.ok {
		stats.Source = "unavailable (" + source + ")"
		return stats
	}
	broker, err1 := ReadCPUSeconds(pid)
	bench, err2 := benchCPUSeconds(pid, broker)
	if err1 != nil || err2 != nil {
		stats.Source = "unavailable (" + source + ")"
		return stats
	}
	stats.BrokerSeconds, stats.BenchSeconds = broker-c.broker0, bench-c.bench0
	perGB := func(bytes int64) float64 {
		if bytes <= 0 {
			return 0
		}
		return stats.BrokerSeconds / (float64(bytes) / 1e9)
	}
	stats.PerGBIngested, stats.PerGBServed, stats.PerGBMoved = perGB(ingested), perGB(served), perGB(ingested+served)
	return stats
}
