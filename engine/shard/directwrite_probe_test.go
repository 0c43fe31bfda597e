package shard

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
)

// benchProbe observes the timed part of a produce benchmark and reports where the time
// went: the process's CPU (cores busy, from /proc/self/stat) and its busiest thread's
// share of one core (/proc/self/task/*/stat: is one goroutine's thread the limit?), the
// shard loops' busy share (ring.Stats Running − Wait), the write ops started per produce,
// their mean size, and the mean number of ops in flight on all shards' rings (sampled every
// benchProbeEvery through the mailbox), and the CPU of io_uring's worker threads. A nil
// probe does nothing.
type benchProbe struct {
	bytesPerOp int64 // bytes one produce carries

	t0      time.Time
	cpu0    int64
	tasks0  map[string]int64
	rings0  []ring.Stats
	stopped chan struct{}
	wg      sync.WaitGroup
	samples int
	inSum   int
	base    int                 // ops in flight when idle (the loops' own armed reads)
	syncs0  engine.SyncCounters // the engine's fsyncs and fdatasyncs at the start
	// latencies of the timed produces (Produce to its answer), filled from the shard
	// loops through latencyCount; reported as produce-p50-µs .. produce-max-ms.
	latencies    []time.Duration
	latencyCount atomic.Int64
}

// expect makes room for the latencies of n produces.
func (p *benchProbe) expect(n int) {
	if p != nil {
		p.latencies = make([]time.Duration, n)
	}
}

// observe records one produce's latency (any goroutine).
func (p *benchProbe) observe(d time.Duration) {
	if i := p.latencyCount.Add(1) - 1; i < int64(len(p.latencies)) {
		p.latencies[i] = d
	}
}

// reportLatencies reports the recorded produce latencies' percentiles.
func (p *benchProbe) reportLatencies(b *testing.B) {
	n := min(int(p.latencyCount.Load()), len(p.latencies))
	if n == 0 {
		return
	}
	lat := p.latencies[:n]
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(n-1, int(q*float64(n)))] }
	b.ReportMetric(float64(at(0.5).Microseconds()), "produce-p50-µs")
	b.ReportMetric(float64(at(0.99).Microseconds()), "produce-p99-µs")
	b.ReportMetric(float64(at(0.999).Microseconds()), "produce-p99.9-µs")
	b.ReportMetric(float64(lat[n-1].Microseconds())/1000, "produce-max-ms")
}

// benchProbeEvery is the in-flight sampling period: 200 mailbox round trips a second per
// shard, noise next to the tens of thousands of completions the benchmarks reap.
const benchProbeEvery = 5 * time.Millisecond

func (p *benchProbe) start(b *testing.B, br *Broker) {
	if p == nil {
		return
	}
	p.rings0 = benchRingStats(b, br)
	for _, st := range p.rings0 {
		p.base += st.InFlight
	}
	p.cpu0, p.tasks0 = procCPUTicks("/proc/self/stat"), taskCPUTicks()
	p.syncs0 = engine.SyncStats()
	p.t0 = time.Now()
	p.stopped = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(benchProbeEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stopped:
				return
			case <-t.C:
			}
			n := 0
			for i := range br.shards {
				_ = br.Exec(i, func(r *ring.Reactor) error { n += r.Stats().InFlight; return nil })
			}
			p.samples++
			p.inSum += n
		}
	}()
}

func (p *benchProbe) stop(b *testing.B, br *Broker) {
	if p == nil {
		return
	}
	close(p.stopped)
	p.wg.Wait()
	wall := time.Since(p.t0)
	rings := benchRingStats(b, br)
	secs := wall.Seconds()
	ticks := float64(clockTicksPerSecond)
	b.ReportMetric(float64(procCPUTicks("/proc/self/stat")-p.cpu0)/ticks/secs, "cpu-cores")
	var maxTask, workers int64
	for tid, v := range taskCPUTicks() {
		maxTask = max(maxTask, v-p.tasks0[tid])
		if comm, _ := os.ReadFile("/proc/self/task/" + tid + "/comm"); strings.HasPrefix(string(comm), "iou-wrk") {
			workers += v - p.tasks0[tid]
		}
	}
	b.ReportMetric(float64(maxTask)/ticks/secs, "thread-max")
	// io_uring's worker threads (writes that could not be issued without blocking, cuts,
	// renames, fsyncs): their CPU, of those alive at the end.
	b.ReportMetric(float64(workers)/ticks/secs, "iowq-cores")
	var busy time.Duration
	var writes uint64
	for i, st := range rings {
		busy += (st.Running - st.Wait) - (p.rings0[i].Running - p.rings0[i].Wait)
		writes += st.WritesStarted - p.rings0[i].WritesStarted
	}
	b.ReportMetric(busy.Seconds()/secs/float64(len(rings)), "loop-busy")
	p.reportLatencies(b)
	reportLostWakeups(b, p.rings0, rings)
	if writes > 0 {
		b.ReportMetric(float64(int64(b.N)*p.bytesPerOp)/float64(writes)/1024, "KiB/write")
	}
	if p.samples > 0 {
		b.ReportMetric(float64(p.inSum-p.base*p.samples)/float64(p.samples), "inflight")
	}
	p.reportSyncs(b, secs)
}

// reportSyncs reports the engine's fsyncs and fdatasyncs per second of the timed part
// (engine.SyncStats; session 14: each costs a device cache flush on ext4): all of them,
// the retention checkpoint's, the recycle pool preparation's, and the data path's (Sync and
// the group commit: segments, their directory, producer snapshots).
func (p *benchProbe) reportSyncs(b *testing.B, secs float64) {
	now, was := engine.SyncStats(), p.syncs0
	if now.Total() == was.Total() {
		return
	}
	rate := func(n int64) float64 { return float64(n) / secs }
	b.ReportMetric(rate(now.Total()-was.Total()), "syncs/s")
	b.ReportMetric(rate(now.CheckpointFile+now.CheckpointDir-was.CheckpointFile-was.CheckpointDir), "ckpt-syncs/s")
	b.ReportMetric(rate(now.PoolLog+now.PoolMapFile+now.PoolMapDir-was.PoolLog-was.PoolMapFile-was.PoolMapDir), "pool-syncs/s")
	b.ReportMetric(rate(now.SegmentData+now.SegmentDir+now.Snapshot-was.SegmentData-was.SegmentDir-was.Snapshot), "data-syncs/s")
}

func benchRingStats(b *testing.B, br *Broker) []ring.Stats {
	out := make([]ring.Stats, len(br.shards))
	for i := range br.shards {
		if err := br.Exec(i, func(r *ring.Reactor) error { out[i] = r.Stats(); return nil }); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// clockTicksPerSecond is USER_HZ, 100 on every Linux that Go supports.
const clockTicksPerSecond = 100

// procCPUTicks is utime + stime of a /proc/.../stat file (0 if unreadable).
func procCPUTicks(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); utime is field 14, stime 15
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// taskCPUTicks is procCPUTicks of every thread of the process, by thread id.
func taskCPUTicks() map[string]int64 {
	out := map[string]int64{}
	paths, _ := filepath.Glob("/proc/self/task/*/stat")
	for _, path := range paths {
		out[filepath.Base(filepath.Dir(path))] = procCPUTicks(path)
	}
	return out
}
