// Package bench owns ringlog's benchmark framework: OpenMessaging-Benchmark-style workload
// files, the Driver interface that systems under test plug into, rate-scheduled producers
// that record publish latency and publish delay (the coordinated-omission correction),
// end-to-end latency from the payload's send timestamp, HdrHistogram summaries, JSON results
// with the hardware they ran on, SVG plots, side-by-side comparison with ratios, the issue's
// target verdicts, a loopback TCP probe, and the ping-pong floors under a one-record round
// trip (a Go echo, and an echo on one ring.Reactor loop as a broker shard serves a connection).
//
// It must not be imported by the broker, and it must not know any system's internals: drivers
// (bench/ringlogdriver over the bundled client, bench/peers in its own module) talk to their
// system over its public interface only.
//
// Files:
//
//	workload.go   workload files: parse, defaults, validation, limits
//	driver.go     Driver/Producer/Consumer interfaces and the driver registry
//	schedule.go   clock, pacer (fixed schedule), producer send loop, counters
//	runner.go     a run: topics, backlog fill, consumers, producers, warm-up, sampling, drain
//	keys.go       key distributions (none, random, hot) and key → partition
//	latency.go    HdrHistogram wrapper and percentile summaries
//	result.go     the result file, RSS sampling
//	compare.go    side-by-side tables, summaries, plot files
//	targets.go    the speed and memory targets, checked on same-run results
//	svg.go        line charts as standalone SVG
//	hardware.go   the hardware line (CPU, memory, kernel, disk, load)
//	loopback.go   loopback TCP bandwidth
//	pingpong.go   the ping-pong client and the Go echo
//	uringecho.go  the io_uring echo (one ring.Reactor loop; setup, recv, send and append options)
//	procnet.go    the PID listening on an address (for broker RSS)
//	memdriver.go  an in-process log, for the harness's own ceiling and for tests
//	disk/         Kafka's linear-vs-random disk experiment through ring/
package bench
