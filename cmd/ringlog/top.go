package main

// `ringlog top`: a live table of a broker's partitions, throughput, latency, lag and ISR,
// read from its admin listener's /metrics (netio/admin/scrape) every --interval.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ringlog/ringlog/netio/admin/scrape"
	"github.com/ringlog/ringlog/netio/security"
)

func init() {
	register("top", "live table of partitions, throughput, latency, lag and ISR from the admin /metrics", runTop)
}

const (
	topUsage        = "top [--admin HOST:PORT] [--interval 2s] [--rows 40] [--topic T] [--once] [--tls-ca F [--tls-cert F --tls-key F]]"
	adminEnv        = "RINGLOG_ADMIN"
	adminDefault    = "127.0.0.1:9401"
	topRoundsMax    = 1 << 30 // bounds the refresh loop (decades at any sane interval)
	topScrapeWait   = 10 * time.Second
	clearScreen     = "\x1b[H\x1b[2J"
	topIntervalMin  = 100 * time.Millisecond
	topRowsDefault  = 40
	topPartitionKey = "topic/partition"
)

type topOptions struct {
	admin    string
	interval time.Duration
	rows     int
	topic    string
	once     bool
	tls      security.ClientTLSOptions // any set: scrape over HTTPS (ringlogd --admin-tls)
}

func parseTopFlags(args []string) (topOptions, error) {
	o := topOptions{}
	fs := newFlagSet("top", topUsage)
	def := adminDefault
	if v, ok := os.LookupEnv(adminEnv); ok && v != "" {
		def = v
	}
	fs.StringVar(&o.admin, "admin", def, "the broker's admin address (ringlogd --admin; env "+adminEnv+")")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "refresh interval; rates are over the last interval")
	fs.IntVar(&o.rows, "rows", topRowsDefault, "partition rows shown, busiest first")
	fs.StringVar(&o.topic, "topic", "", "show only this topic's partitions")
	tlsFlags(fs, &o.tls)
	fs.BoolVar(&o.once, "once", false, "print one table (two scrapes --interval apart) and exit, without clearing the screen")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return o, err
	}
	if err := wantArgs(positional); err != nil {
		return o, err
	}
	if o.interval < topIntervalMin {
		return o, fmt.Errorf("--interval %v: at least %v", o.interval, topIntervalMin)
	}
	if o.rows < 1 {
		return o, fmt.Errorf("--rows %d: at least 1", o.rows)
	}
	return o, nil
}

func runTop(args []string) error {
	o, err := parseTopFlags(args)
	if errors.Is(err, errHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return top(ctx, o, os.Stdout)
}

// top scrapes every interval and prints a table from the last two scrapes.
func top(ctx context.Context, o topOptions, out io.Writer) error {
	tc, err := clientTLS(o.tls)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: topScrapeWait}
	url := "http://" + o.admin + "/metrics"
	if tc != nil {
		hc.Transport = &http.Transport{TLSClientConfig: tc}
		url = "https://" + o.admin + "/metrics"
	}
	prev, err := scrape.Fetch(ctx, hc, url)
	if err != nil {
		return firstScrapeError(err, o, tc != nil)
	}
	prevAt := time.Now()
	for round := 0; round < topRoundsMax; round++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.interval):
		}
		cur, err := scrape.Fetch(ctx, hc, url)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		var b strings.Builder
		if !o.once {
			b.WriteString(clearScreen)
		}
		renderTop(&b, o, prev, cur, now.Sub(prevAt), now)
		if _, err := io.WriteString(out, b.String()); err != nil {
			return err
		}
		if o.once {
			return nil
		}
		prev, prevAt = cur, now
	}
	return nil
}

// firstScrapeError adds to a failed first scrape what the usual causes are and what to
// do: no admin listener at --admin, or one that serves HTTPS (ringlogd --tls-cert with
// --admin-tls on answers plain HTTP with 400).
func firstScrapeError(err error, o topOptions, overTLS bool) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: nothing listens on %s; give --admin (or $%s) the broker's admin address, ringlogd --admin", err, o.admin, adminEnv)
	case !overTLS && strings.Contains(err.Error(), "400 Bad Request"):
		return fmt.Errorf("%w: the admin listener may serve HTTPS (ringlogd --tls-cert with --admin-tls on): give --tls-ca", err)
	}
	return err
}

// renderTop writes the table for the interval between prev and cur.
func renderTop(w io.Writer, o topOptions, prev, cur scrape.Metrics, elapsed time.Duration, now time.Time) {
	secs := elapsed.Seconds()
	rate := func(name string) float64 { return max(cur.Sum(name)-prev.Sum(name), 0) / secs }
	value := func(name string) float64 { v, _ := cur.Value(name); return v }
	fmt.Fprintf(w, "ringlog top  %s  %s  every %v\n", o.admin, now.UTC().Format(time.RFC3339), o.interval)
	fmt.Fprintf(w, "connections %.0f  under-replicated %.0f  offline %.0f  isr shrinks %.0f  rss %s\n",
		value("ringlog_connections"), value("ringlog_under_replicated_partitions"), value("ringlog_offline_partitions"),
		value("ringlog_isr_shrinks_total"), bytesOf(value("process_resident_memory_bytes")))
	fmt.Fprintf(w, "produce %8.0f req/s %9s/s  p99 %s   fetch %8.0f req/s %9s/s  p99 %s   fsync p99 %s   errors %.0f/s\n\n",
		rate("ringlog_produce_requests_total"), bytesOf(rate("ringlog_produce_bytes_total")), p99(prev, cur, "ringlog_produce_latency_seconds"),
		rate("ringlog_fetch_requests_total"), bytesOf(rate("ringlog_fetch_bytes_total")), p99(prev, cur, "ringlog_fetch_latency_seconds"),
		p99(prev, cur, "ringlog_fsync_latency_seconds"), rate("ringlog_produce_errors_total")+rate("ringlog_fetch_errors_total"))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SHARD\tBUSY\tRING IN FLIGHT\tMAILBOX\tPRODUCE/S\tFETCH/S\t")
	for _, s := range sortedSamples(cur["ringlog_shard_loop_busy_ratio"], "shard") {
		id := s.Labels["shard"]
		shardRate := func(name string) float64 {
			c, _ := cur.Value(name, "shard", id)
			p, _ := prev.Value(name, "shard", id)
			return max(c-p, 0) / secs
		}
		inflight, _ := cur.Value("ringlog_shard_ring_inflight", "shard", id)
		mailbox, _ := cur.Value("ringlog_shard_mailbox_depth", "shard", id)
		fmt.Fprintf(tw, "%s\t%.0f%%\t%.0f\t%.0f\t%.0f\t%.0f\t\n", id, 100*s.Value, inflight, mailbox,
			shardRate("ringlog_produce_requests_total"), shardRate("ringlog_fetch_requests_total"))
	}
	tw.Flush()
	fmt.Fprintln(w)
	renderPartitions(w, o, prev, cur, secs)
	renderGroups(w, o, cur)
}

type partitionRow struct {
	topic, partition                  string
	start, end, hw, size, segs        float64
	isr, replicas, recordsPS, bytesPS float64
}

func renderPartitions(w io.Writer, o topOptions, prev, cur scrape.Metrics, secs float64) {
	var rows []partitionRow
	for _, s := range cur["ringlog_partition_log_end_offset"] {
		topic, part := s.Labels["topic"], s.Labels["partition"]
		if o.topic != "" && topic != o.topic {
			continue
		}
		get := func(m scrape.Metrics, name string) float64 {
			v, _ := m.Value(name, "topic", topic, "partition", part)
			return v
		}
		r := partitionRow{topic: topic, partition: part, end: s.Value,
			start: get(cur, "ringlog_partition_log_start_offset"), hw: get(cur, "ringlog_partition_high_watermark"),
			size: get(cur, "ringlog_partition_size_bytes"), segs: get(cur, "ringlog_partition_segments"),
			isr: get(cur, "ringlog_partition_isr_size"), replicas: get(cur, "ringlog_partition_replicas")}
		if prevEnd, ok := prev.Value("ringlog_partition_log_end_offset", "topic", topic, "partition", part); ok {
			r.recordsPS = max(s.Value-prevEnd, 0) / secs
			r.bytesPS = max(r.size-get(prev, "ringlog_partition_size_bytes"), 0) / secs
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].bytesPS != rows[j].bytesPS {
			return rows[i].bytesPS > rows[j].bytesPS
		}
		if rows[i].topic != rows[j].topic {
			return rows[i].topic < rows[j].topic
		}
		return rows[i].partition < rows[j].partition
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TOPIC\tPART\tSTART\tEND\tHW\tRECORDS/S\tBYTES/S\tSIZE\tSEGS\tISR\t")
	for i, r := range rows {
		if i == o.rows {
			fmt.Fprintf(tw, "… %d more\t\t\t\t\t\t\t\t\t\t\n", len(rows)-o.rows)
			break
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%.0f\t%.0f/%.0f\t\n", r.topic, r.partition, r.start, r.end, r.hw,
			r.recordsPS, bytesOf(r.bytesPS), bytesOf(r.size), r.segs, r.isr, r.replicas)
	}
	tw.Flush()
}

// renderGroups shows consumer group lag when the broker exports it (ringlog_group_*).
func renderGroups(w io.Writer, o topOptions, cur scrape.Metrics) {
	lags := cur["ringlog_group_lag_records"]
	if len(lags) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPART\tCOMMITTED\tLAG\tLAG SECONDS\tRETENTION LEFT\t")
	for _, s := range sortedSamples(lags, "group", "topic", "partition") {
		g, t, p := s.Labels["group"], s.Labels["topic"], s.Labels["partition"]
		if o.topic != "" && t != o.topic {
			continue
		}
		get := func(name string) string {
			v, ok := cur.Value(name, "group", g, "topic", t, "partition", p)
			switch {
			case !ok || v < 0:
				return "-"
			case math.IsInf(v, 1):
				return "never"
			}
			return fmt.Sprintf("%.0f", v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t\n", g, t, p, get("ringlog_group_committed_offset"), s.Value,
			get("ringlog_group_lag_seconds"), get("ringlog_group_retention_overtake_seconds"))
	}
	tw.Flush()
}

func sortedSamples(samples []scrape.Sample, labels ...string) []scrape.Sample {
	out := append([]scrape.Sample(nil), samples...)
	sort.Slice(out, func(i, j int) bool {
		for _, l := range labels {
			a, b := out[i].Labels[l], out[j].Labels[l]
			if len(a) != len(b) { // numeric labels (shard, partition) in numeric order
				return len(a) < len(b)
			}
			if a != b {
				return a < b
			}
		}
		return false
	})
	return out
}

// p99 is the 99th percentile of a histogram over the interval (its bucket deltas).
func p99(prev, cur scrape.Metrics, name string) string {
	c, ok := firstSample(cur, name)
	if !ok {
		return "-"
	}
	delta := scrape.Sample{Value: c.Value, Buckets: map[float64]uint64{}}
	p, _ := firstSample(prev, name)
	delta.Value -= p.Value
	for bound, count := range c.Buckets {
		delta.Buckets[bound] = count - min(p.Buckets[bound], count)
	}
	if delta.Value <= 0 {
		return "-"
	}
	return time.Duration(delta.Quantile(0.99) * float64(time.Second)).Round(time.Microsecond).String()
}

func firstSample(m scrape.Metrics, name string) (scrape.Sample, bool) {
	if s := m[name]; len(s) > 0 {
		return s[0], true
	}
	return scrape.Sample{}, false
}

// bytesOf formats a float count of bytes (a rate or a gauge) like humanBytes.
func bytesOf(n float64) string { return humanBytes(int64(n)) }
