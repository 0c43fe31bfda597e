package admin

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/wire"
)

// Metric names and help texts. docs/operations.md "Metrics" lists each with its meaning;
// TestOperationsDocListsEveryMetric keeps the two in step.
var (
	partitionLabels = []string{"topic", "partition"}
	shardLabels     = []string{"shard"}

	descLogStart    = prometheus.NewDesc("ringlog_partition_log_start_offset", "Oldest offset the partition still holds (retention moves it).", partitionLabels, nil)
	descLogEnd      = prometheus.NewDesc("ringlog_partition_log_end_offset", "Offset the next appended record gets.", partitionLabels, nil)
	descHighWater   = prometheus.NewDesc("ringlog_partition_high_watermark", "Offset below which consumers may read.", partitionLabels, nil)
	descSize        = prometheus.NewDesc("ringlog_partition_size_bytes", "Bytes of the partition's segment files.", partitionLabels, nil)
	descSegments    = prometheus.NewDesc("ringlog_partition_segments", "Segment files of the partition.", partitionLabels, nil)
	descISR         = prometheus.NewDesc("ringlog_partition_isr_size", "In-sync replicas of a partition this broker leads, the leader included.", partitionLabels, nil)
	descLeader      = prometheus.NewDesc("ringlog_partition_leader", "1 when this broker leads the partition, 0 when it follows.", partitionLabels, nil)
	descReplicas    = prometheus.NewDesc("ringlog_partition_replicas", "Replicas assigned to the partition (its replication factor).", partitionLabels, nil)
	descUnderRepl   = prometheus.NewDesc("ringlog_under_replicated_partitions", "Partitions whose ISR is smaller than their replica set.", nil, nil)
	descOffline     = prometheus.NewDesc("ringlog_offline_partitions", "Partitions that cannot take writes: their log failed (sticky fdatasync or storage error) or their ISR is empty.", nil, nil)
	descCorrupt     = prometheus.NewDesc("ringlog_partition_corrupt_batches", "Bad batches found in sealed segments (scrubber or --verify-segments).", partitionLabels, nil)
	descISRShrinks  = prometheus.NewDesc("ringlog_isr_shrinks_total", "Times a follower left the ISR of a partition this broker leads.", nil, nil)
	descISRExpands  = prometheus.NewDesc("ringlog_isr_expands_total", "Times a follower rejoined the ISR of a partition this broker leads.", nil, nil)
	descFetchRounds = prometheus.NewDesc("ringlog_replica_fetch_rounds_total", "Follower fetch rounds of this broker that a leader answered.", nil, nil)
	descReplAppends = prometheus.NewDesc("ringlog_replica_appends_total", "Partition appends of leaders' batches that this broker's follower fetch rounds carried.", nil, nil)
	descRefusedRnds = prometheus.NewDesc("ringlog_replica_fetch_refused_rounds_total", "Follower fetch rounds whose every partition the leader refused (not leader, leader epoch); each is followed by a 20 ms pause.", nil, nil)
	descSlowRounds  = prometheus.NewDesc("ringlog_replica_fetch_slow_rounds_total", "In-sync follower fetch rounds of this broker that took 100 ms or longer (long-polls on partitions nobody wrote to meanwhile, or a slow leader).", nil, nil)
	descLaneKicks   = prometheus.NewDesc("ringlog_replica_lane_kicks_total", "Follower fetch lanes whose round was cut short because a replica entered the in-sync lane (joined its ISR).", nil, nil)
	descLaneWakes   = prometheus.NewDesc("ringlog_replica_lane_wakes_total", "Lane kicks that asked the leader to answer the parked round on the lane's connection (ReplicaFetchWake) instead of dropping the connection.", nil, nil)
	descLaneDials   = prometheus.NewDesc("ringlog_replica_lane_dials_total", "Connections this broker's follower fetch lanes opened to leaders (one per lane, another after a failure or a kick that had to drop it).", nil, nil)
	descParks       = prometheus.NewDesc("ringlog_replica_fetch_parks_total", "Followers' fetches that parked on this leader's shards, by what ended the park (ready: data came between the read and the park; append, sync, moved: the replicator; deadline; removed).", []string{"cause"}, nil)
	descLateParks   = prometheus.NewDesc("ringlog_replica_fetch_late_parks_total", "The parks of ringlog_replica_fetch_parks_total that lasted 100 ms or longer, by what ended them.", []string{"cause"}, nil)
	descSubmissions = prometheus.NewDesc("ringlog_shard_ring_submissions_total", "Operations the shard queued on its io_uring ring (or the syscall fallback).", shardLabels, nil)
	descCompletions = prometheus.NewDesc("ringlog_shard_ring_completions_total", "Completions the shard's ring delivered.", shardLabels, nil)
	descInFlight    = prometheus.NewDesc("ringlog_shard_ring_inflight", "Operations submitted on the shard's ring and not yet completed (queue depth).", shardLabels, nil)
	descWaitsExp    = prometheus.NewDesc("ringlog_shard_ring_waits_expired_total", "Waits of the shard's loop that ran to their 10 ms bound while file operations were in flight.", shardLabels, nil)
	descLostWakes   = prometheus.NewDesc("ringlog_shard_ring_lost_wakeups_total", "Waits that ran to their bound and then found completions waiting: the kernel did not wake the loop (an upper bound).", shardLabels, nil)
	descBacklogTurn = prometheus.NewDesc("ringlog_shard_loop_backlog_turns_total", "Blocking loop turns that began by dispatching completions reaped outside the loop (such a turn does not wait).", shardLabels, nil)
	descBusy        = prometheus.NewDesc("ringlog_shard_loop_busy_seconds_total", "Time the shard loop spent working (not blocked waiting for completions, wake-ups or timers).", shardLabels, nil)
	descRunning     = prometheus.NewDesc("ringlog_shard_loop_running_seconds_total", "Time since the shard loop started.", shardLabels, nil)
	descBusyRatio   = prometheus.NewDesc("ringlog_shard_loop_busy_ratio", "Share of time the shard loop worked since the previous scrape (0..1).", shardLabels, nil)
	descMailbox     = prometheus.NewDesc("ringlog_shard_mailbox_depth", "Messages waiting in the shard's mailbox (cross-shard work, admin).", shardLabels, nil)
	descProduceReqs = prometheus.NewDesc("ringlog_produce_requests_total", "Partition appends (one per partition of a produce request) that reached their shard.", shardLabels, nil)
	descProduceB    = prometheus.NewDesc("ringlog_produce_bytes_total", "Record batch bytes produced to the shard's partitions.", shardLabels, nil)
	descProduceErr  = prometheus.NewDesc("ringlog_produce_errors_total", "Failed partition produces by protocol error code.", []string{"code"}, nil)
	descFetchReqs   = prometheus.NewDesc("ringlog_fetch_requests_total", "Fetch requests answered (counted on the shard that completed the answer).", shardLabels, nil)
	descFetchB      = prometheus.NewDesc("ringlog_fetch_bytes_total", "Record batch bytes returned by fetches.", shardLabels, nil)
	descFetchErr    = prometheus.NewDesc("ringlog_fetch_errors_total", "Failed partition fetch results by protocol error code.", []string{"code"}, nil)
	descProduceLat  = prometheus.NewDesc("ringlog_produce_latency_seconds", "Produce latency, from arrival on the owning shard to the answer (acks=all and flush.always include the fdatasync).", nil, nil)
	descFetchLat    = prometheus.NewDesc("ringlog_fetch_latency_seconds", "Fetch latency, from the request reaching the broker core to the answer, long-poll wait included.", nil, nil)
	descFsyncLat    = prometheus.NewDesc("ringlog_fsync_latency_seconds", "Latency of group-commit fdatasyncs (one per partition sync).", nil, nil)
	descFsyncInline = prometheus.NewDesc("ringlog_fsync_inline_total", "Group-commit syncs the shard ran inline on its own thread (the one sync of a quiet loop turn; the loop was blocked for it).", shardLabels, nil)
	descConns       = prometheus.NewDesc("ringlog_connections", "Open client connections on the main listener.", nil, nil)
	descRefusedConn = prometheus.NewDesc("ringlog_connections_refused_total", "Connections closed at accept by --max-connections or --max-connections-per-address.", nil, nil)
	descFrames      = prometheus.NewDesc("ringlog_requests_total", "Request frames read on the main listener, every API.", nil, nil)
	descRefusedReq  = prometheus.NewDesc("ringlog_requests_refused_total", "Requests refused by --max-request-entries or for a repeated entry.", nil, nil)
	descSendfile    = prometheus.NewDesc("ringlog_fetch_sendfile_bytes_total", "File bytes sent to consumers with sendfile/splice (zero copy).", nil, nil)
	descBuffered    = prometheus.NewDesc("ringlog_buffered_bytes", "Request and response bytes held by all connections (bounded by --max-buffer-bytes).", nil, nil)
	descWBStarted   = prometheus.NewDesc("ringlog_writeback_started_total", "Write-back starts (sync_file_range of an appended range) the broker asked the kernel for (--writeback-bytes).", nil, nil)
	descWBDropped   = prometheus.NewDesc("ringlog_writeback_dropped_total", "Write-back starts dropped because the write-back goroutine's queue was full (a hint only: nothing acknowledged depends on it).", nil, nil)
	descWBWakeups   = prometheus.NewDesc("ringlog_writeback_wakeups_total", "Times an append found the write-back goroutine idle and woke it (a busy one polls its queue every 20 ms instead).", nil, nil)
	descZeroJobs    = prometheus.NewDesc("ringlog_preallocate_jobs_total", "Background zeroing jobs started ahead of active segments' ends (preallocate.bytes).", nil, nil)
	descZeroBytes   = prometheus.NewDesc("ringlog_preallocate_bytes_total", "Zero bytes written ahead of active segments' ends (preallocate.bytes).", nil, nil)
	descZeroFailed  = prometheus.NewDesc("ringlog_preallocate_failed_total", "Zeroing jobs that stopped on an error (disk space, I/O); appends then extend the file as without preallocation.", nil, nil)
	descRecPooled   = prometheus.NewDesc("ringlog_recycle_pooled_total", "Retired segment files kept for reuse (recycle.segments).", nil, nil)
	descRecReused   = prometheus.NewDesc("ringlog_recycle_reused_total", "New segments that took a kept retired file (recycle.segments).", nil, nil)
	descRecReleased = prometheus.NewDesc("ringlog_recycle_released_total", "Kept retired files removed unused (a truncation below the log start, an append the disk guard refused, a failed rename).", nil, nil)
	descRecUnmapped = prometheus.NewDesc("ringlog_recycle_unmapped_total", "Retired segment files not kept for reuse for want of a batch map of their content (active at a crash, its map lost to a power loss, compacted, too many batches).", nil, nil)
	descScrapeErr   = prometheus.NewDesc("ringlog_scrape_error", "1 when the shards could not be read for this scrape (broker shutting down or a loop stuck).", nil, nil)
)

// replicaFetches is what a Replication that runs follower fetchers may report
// (cluster.Manager does): its rounds, the partition appends they carried and the rounds
// the leader refused whole.
type replicaFetches interface {
	ReplicaFetches() (rounds, appends, refused uint64)
}

// replicaLanes is the follower lanes' view of *cluster.Manager.
type replicaLanes interface {
	ReplicaLanes() (slowRounds, kicks uint64)
}

// replicaLaneConns is the follower lanes' connections, as *cluster.Manager counts them.
type replicaLaneConns interface {
	ReplicaLaneConns() (dials, wakes uint64)
}

// WritebackStats is what the admin metrics read of engine.Writeback.
type WritebackStats interface {
	Stats() (started, dropped uint64)
	Wakeups() uint64
}

// collector turns one Broker.Stats copy per scrape into metrics. It keeps the previous
// scrape's loop times for the busy ratio.
type collector struct {
	core   *shard.Broker
	net    *netio.Server
	rep    Replication
	groups Groups // nil: no group lag series
	wb     WritebackStats

	mu   sync.Mutex // guards prev: scrapes may overlap
	prev map[int]loopTimes
}

type loopTimes struct{ busy, running time.Duration }

func newCollector(core *shard.Broker, srv *netio.Server, rep Replication, groups Groups, wb WritebackStats) *collector {
	return &collector{core: core, net: srv, rep: rep, groups: groups, wb: wb, prev: map[int]loopTimes{}}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLogStart, descLogEnd, descHighWater, descSize, descSegments, descISR, descLeader,
		descReplicas, descUnderRepl, descOffline, descCorrupt, descISRShrinks, descISRExpands, descFetchRounds, descReplAppends, descRefusedRnds, descSlowRounds, descLaneKicks, descLaneWakes, descLaneDials, descParks, descLateParks, descSubmissions,
		descCompletions, descInFlight, descWaitsExp, descLostWakes, descBacklogTurn, descBusy, descRunning, descBusyRatio, descMailbox, descProduceReqs, descProduceB,
		descProduceErr, descFetchReqs, descFetchB, descFetchErr, descProduceLat, descFetchLat, descFsyncLat, descFsyncInline,
		descConns, descRefusedConn, descFrames, descRefusedReq, descSendfile, descBuffered, descScrapeErr,
		descWBStarted, descWBDropped, descWBWakeups, descZeroJobs, descZeroBytes, descZeroFailed,
		descRecPooled, descRecReused, descRecReleased, descRecUnmapped} {
		ch <- d
	}
	for _, d := range groupDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.collectServer(ch)
	c.collectStorage(ch)
	shrinks, expands := c.rep.ISRChanges()
	ch <- counter(descISRShrinks, float64(shrinks))
	ch <- counter(descISRExpands, float64(expands))
	if rf, ok := c.rep.(replicaFetches); ok {
		rounds, appends, refused := rf.ReplicaFetches()
		ch <- counter(descFetchRounds, float64(rounds))
		ch <- counter(descReplAppends, float64(appends))
		ch <- counter(descRefusedRnds, float64(refused))
	}
	if rl, ok := c.rep.(replicaLanes); ok {
		slow, kicks := rl.ReplicaLanes()
		ch <- counter(descSlowRounds, float64(slow))
		ch <- counter(descLaneKicks, float64(kicks))
	}
	if rc, ok := c.rep.(replicaLaneConns); ok {
		dials, wakes := rc.ReplicaLaneConns()
		ch <- counter(descLaneDials, float64(dials))
		ch <- counter(descLaneWakes, float64(wakes))
	}
	stats, err := c.core.Stats()
	if err != nil {
		ch <- gauge(descScrapeErr, 1)
		return
	}
	ch <- gauge(descScrapeErr, 0)
	var produce, fetch shard.OpStats
	var fsync shard.Histogram
	var parks, lateParks [core.WakeCauses]uint64
	var under, offline int
	replicas := c.rep.ReplicaCounts()
	for i := range stats {
		s := &stats[i]
		c.collectShard(ch, s)
		produce.Add(&s.Produce)
		fetch.Add(&s.Fetch)
		fsync.Add(&s.Fsync)
		for cause := range parks {
			parks[cause] += s.ReplicaWakes[cause]
			lateParks[cause] += s.ReplicaWakesLate[cause]
		}
		for _, p := range s.Partitions {
			tp := shard.TopicPartition{Topic: p.Topic, Partition: p.Partition}
			n, ok := replicas[tp]
			if !ok {
				n = 1
			}
			u, o := c.collectPartition(ch, &p, n, c.rep.Leads(tp))
			under += u
			offline += o
		}
	}
	ch <- gauge(descUnderRepl, float64(under))
	ch <- gauge(descOffline, float64(offline))
	collectErrors(ch, descProduceErr, &produce.Errors)
	collectErrors(ch, descFetchErr, &fetch.Errors)
	ch <- histogram(descProduceLat, &produce.Latency)
	ch <- histogram(descFetchLat, &fetch.Latency)
	ch <- histogram(descFsyncLat, &fsync)
	for cause := range core.WakeCauses {
		ch <- counter(descParks, float64(parks[cause]), cause.String())
		ch <- counter(descLateParks, float64(lateParks[cause]), cause.String())
	}
	c.collectGroups(ch, stats)
}

func (c *collector) collectServer(ch chan<- prometheus.Metric) {
	if c.net == nil {
		return
	}
	st := c.net.Stats()
	ch <- gauge(descConns, float64(c.net.ConnCount()))
	ch <- counter(descRefusedConn, float64(st.RefusedConns))
	ch <- counter(descFrames, float64(st.Requests))
	ch <- counter(descRefusedReq, float64(st.RefusedRequests))
	ch <- counter(descSendfile, float64(st.SendfileBytes))
	ch <- gauge(descBuffered, float64(c.net.BufferedBytes()))
}

func (c *collector) collectShard(ch chan<- prometheus.Metric, s *shard.ShardStats) {
	label := strconv.Itoa(s.Shard)
	busy := s.Ring.Running - s.Ring.Wait
	ch <- counter(descSubmissions, float64(s.Ring.Submitted), label)
	ch <- counter(descCompletions, float64(s.Ring.Completed), label)
	ch <- gauge(descInFlight, float64(s.Ring.InFlight), label)
	ch <- counter(descWaitsExp, float64(s.Ring.WaitsExpired), label)
	ch <- counter(descLostWakes, float64(s.Ring.LostWakeups), label)
	ch <- counter(descBacklogTurn, float64(s.Ring.BacklogTurns), label)
	ch <- counter(descBusy, busy.Seconds(), label)
	ch <- counter(descRunning, s.Ring.Running.Seconds(), label)
	ch <- gauge(descBusyRatio, c.busyRatio(s.Shard, loopTimes{busy: busy, running: s.Ring.Running}), label)
	ch <- gauge(descMailbox, float64(s.MailboxDepth), label)
	ch <- counter(descProduceReqs, float64(s.Produce.Requests), label)
	ch <- counter(descProduceB, float64(s.Produce.Bytes), label)
	ch <- counter(descFetchReqs, float64(s.Fetch.Requests), label)
	ch <- counter(descFetchB, float64(s.Fetch.Bytes), label)
	ch <- counter(descFsyncInline, float64(s.FsyncInline), label)
}

// busyRatio is the loop's busy share since the previous scrape (since it started, on the
// first scrape).
func (c *collector) busyRatio(shardIndex int, now loopTimes) float64 {
	c.mu.Lock()
	prev := c.prev[shardIndex]
	c.prev[shardIndex] = now
	c.mu.Unlock()
	elapsed := now.running - prev.running
	if elapsed <= 0 {
		return 0
	}
	return min(max(float64(now.busy-prev.busy)/float64(elapsed), 0), 1)
}

// collectPartition sends one partition's metrics and says whether it is under-replicated
// and offline (1 or 0 each).
func (c *collector) collectPartition(ch chan<- prometheus.Metric, p *shard.PartitionState, replicas int, leader bool) (under, offline int) {
	labels := []string{p.Topic, strconv.Itoa(int(p.Partition))}
	if p.Err != "" {
		offline = 1
	}
	ch <- gauge(descLeader, boolValue(leader), labels...)
	ch <- gauge(descLogStart, float64(p.LogStartOffset), labels...)
	ch <- gauge(descLogEnd, float64(p.LogEndOffset), labels...)
	ch <- gauge(descHighWater, float64(p.HighWatermark), labels...)
	ch <- gauge(descSize, float64(p.SizeBytes), labels...)
	ch <- gauge(descSegments, float64(p.Segments), labels...)
	ch <- gauge(descReplicas, float64(replicas), labels...)
	ch <- gauge(descCorrupt, float64(p.CorruptBatches), labels...)
	if !leader { // a follower's ISR is its leader's to report
		return under, offline
	}
	ch <- gauge(descISR, float64(p.InSyncReplicas), labels...)
	if p.InSyncReplicas < replicas {
		under = 1
	}
	if p.InSyncReplicas <= 0 {
		offline = 1
	}
	return under, offline
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectErrors sends one series per error code seen (codes never seen are left out).
func collectErrors(ch chan<- prometheus.Metric, desc *prometheus.Desc, errs *[shard.ErrorCodeSlots]uint64) {
	for code, n := range errs {
		if n > 0 {
			ch <- counter(desc, float64(n), wire.ErrorCode(code).Name())
		}
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// histogram converts a shard histogram (per-bucket counts) to Prometheus's cumulative one.
func histogram(d *prometheus.Desc, h *shard.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(shard.LatencyBuckets))
	var cumulative uint64
	for i, bound := range shard.LatencyBuckets {
		cumulative += h.Counts[i]
		buckets[bound.Seconds()] = cumulative
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets)
}

// collectStorage reports the page-cache write-back starter's and the background zeroing's
// counters (both off the shard loops, so not in Broker.Stats).
func (c *collector) collectStorage(ch chan<- prometheus.Metric) {
	if c.wb != nil {
		started, dropped := c.wb.Stats()
		ch <- counter(descWBStarted, float64(started))
		ch <- counter(descWBDropped, float64(dropped))
		ch <- counter(descWBWakeups, float64(c.wb.Wakeups()))
	}
	z := engine.ZeroAheadStats()
	ch <- counter(descZeroJobs, float64(z.Jobs))
	ch <- counter(descZeroBytes, float64(z.Bytes))
	ch <- counter(descZeroFailed, float64(z.Failed))
	rc := engine.RecycleStats()
	ch <- counter(descRecPooled, float64(rc.Pooled))
	ch <- counter(descRecReused, float64(rc.Reused))
	ch <- counter(descRecReleased, float64(rc.Released))
	ch <- counter(descRecUnmapped, float64(rc.Unmapped))
}
