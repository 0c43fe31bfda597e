#!/usr/bin/env bash
# The cost of replication, on 3 real ringlogd processes on 127.0.0.1 (each a controller voter,
# --node-id / --controller-voters, fresh temp data dirs), measured with `ringlog bench run`:
#
# (a) max-rate 1 KiB produce with acks=all at --replication-factor 1 and then 3, same cluster,
#     same run: publish MB/s and publish p99.
# (b) producer latency around a follower's catch-up, in one run: a fixed-rate (RATE msg/s,
#     1 KiB, acks=all, RF=3) window with all brokers in sync; then twice (unthrottled, and
#     with node 3 restarted with --replication-throttled-bytes-per-second THROTTLE): node 3
#     is killed (-9), `ringlog produce --acks 1` writes BACKLOG_MIB MiB of 1 KiB records into
#     the RF=3 topic "backlog" (on nodes 1 and 2 only), everything is synced to disk, node 3
#     restarts and the same fixed-rate window is measured at once while node 3 copies the
#     backlog. Printed per window: catch-up seconds (until node 3 is back in every ISR,
#     polled with `ringlog cluster describe`), publish p50/p99 from the actual and from the
#     intended send time (coordinated omission included), each broker's CPU seconds, and
#     the machine's CPU and I/O pressure (PSI "some") over the window.
#
#   bench/replication-catchup.sh
#   RATE=5000 BACKLOG_MIB=300 MEASURE=20s THROTTLE=20971520 bench/replication-catchup.sh
#   MAXRATE_RFS= MEASURE=40s BROKER_FLAGS="--writeback-bytes 0" bench/replication-catchup.sh
#       # (b) only, windows long enough for the kernel's write-back of the catch-up copy
#       # (30 s after it), extra flags for every ringlogd
#   MAXRATE_RFS= PROFILE=/tmp/prof bench/replication-catchup.sh   # (b) only; CPU profiles
#       of nodes 1 and 3 over the first 5 s of each catch-up (--debug-addr PORT_BASE+21..23)
#
# docs/benchmarks.md records results. Node 3's data dir keeps its old log, so a restart
# catches up only what it missed. Ports: PORT_BASE+1..3 (clients), PORT_BASE+11..13 (raft).
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${RATE:-5000}
backlog_mib=${BACKLOG_MIB:-300}
measure=${MEASURE:-20s}
throttle=${THROTTLE:-$((20 << 20))}
base=${PORT_BASE:-19100}

go build -o bin/ ./cmd/...
# TRACE=dir: keep each window's bench result (TRACE/NAME.json), each broker's fsync-latency
# histogram and replica fetch counters (slow in-sync rounds, lane kicks, parks by cause)
# before and after it (TRACE/NAME-{fsync,replica}-nN-{0,1}.txt, from its /metrics on
# 127.0.0.1:PORT_BASE+31..33) and the wall-clock events (TRACE/events: "epoch event").
[ -n "${TRACE:-}" ] && mkdir -p "$TRACE" && : >"$TRACE/events"
admin_of() { if [ -n "${TRACE:-}" ]; then echo "127.0.0.1:$((base + 30 + $1))"; else echo 127.0.0.1:0; fi; }
event() { [ -n "${TRACE:-}" ] && echo "$(date +%s.%N) $*" >>"$TRACE/events"; return 0; }
fsyncs() { # fsyncs NAME PHASE: each broker's fsync histogram, and its replica fetch counters (TRACE/NAME-replica-nN-PHASE.txt)
  [ -z "${TRACE:-}" ] && return 0
  local n m; for n in 1 2 3; do
    m=$(curl -s "http://$(admin_of "$n")/metrics" || true)
    grep '^ringlog_fsync_latency_seconds' <<<"$m" >"$TRACE/$1-fsync-n$n-$2.txt" || true
    grep '^ringlog_replica_\|^ringlog_isr_' <<<"$m" >"$TRACE/$1-replica-n$n-$2.txt" || true
  done
}
dir=$(mktemp -d)
declare -a pids
voters=""
for n in 1 2 3; do voters+="${voters:+,}$n@127.0.0.1:$((base + 10 + n))"; done
start() { # start NODE [extra ringlogd flags...]
  local n=$1; shift
  bin/ringlogd --data "$dir/data$n" --listen "127.0.0.1:$((base + n))" --shard-ports off --admin "$(admin_of "$n")" \
    --node-id "$n" --controller-voters "$voters" ${PROFILE:+--debug-addr "127.0.0.1:$((base + 20 + n))"} ${BROKER_FLAGS:-} "$@" 2>>"$dir/broker$n.log" &
  pids[$n]=$!
}
cleanup() {
  for n in 1 2 3; do [ -n "${pids[$n]:-}" ] && kill "${pids[$n]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${TRACE:-}" ] && cp "$dir"/broker*.log "$TRACE/" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
b1=127.0.0.1:$((base + 1))
describe() { bin/ringlog --broker "$b1" cluster describe 2>/dev/null || true; }
live() { describe | grep -c ' live$' || true; }
wait_live() {
  for _ in $(seq 300); do [ "$(live)" = 3 ] && return; sleep 0.1; done
  echo "cluster not live"; for f in "$dir"/broker*.log; do tail -n 5 "$f"; done; describe; exit 1
}
# lagging: partitions that have node 3 among their replicas but not in their ISR.
lagging() { describe | awk '/^  partition/ { r=$0; sub(/.*replicas=\[/, "", r); sub(/\].*/, "", r); i=$0; sub(/.*isr=\[/, "", i); sub(/\].*/, "", i)
  if (("," r ",") ~ /,3,/ && ("," i ",") !~ /,3,/) n++ } END { print n + 0 }'; }

# Producers only: the consumer's first ListOffsets right after an RF>1 create can reach a
# broker that is not (yet known as) the leader and fails the run; producer latency is what
# this script measures.
producers_only='s/^acks: .*/acks: "all"/; s/^consumers: .*/consumers: 0/'
sed "$producers_only" bench/workloads/max-rate-1kib.yaml >"$dir/max-rate-acks-all.yaml"
sed "$producers_only" bench/workloads/fixed-rate-latency-1kib.yaml >"$dir/fixed-rate-acks-all.yaml"
run() { # run OUT WORKLOAD [flags...]: bench run against node 1
  local out=$1 workload=$2; shift 2
  bin/ringlog bench run --broker "$b1" --broker-pid "${pids[1]}" --out "$dir/out" "$@" "$workload" >"$out" 2>"$out.err" || { cat "$out" "$out.err"; exit 1; }
}
# fields of a bench run's summary: publish MB/s, publish p99 µs, publish-from-intended p99 µs
mbps() { awk '$1 == "publish" && $3 == "msg/s" { print $4 }' "$1"; }
p99() { awk '$1 == "publish" && $2 ~ /^[0-9]+$/ && $3 != "msg/s" { print $5 }' "$1"; }
p99i() { awk '$1 == "publish" && $2 == "(from" { print $7 }' "$1"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

for n in 1 2 3; do start "$n" --broker-session-timeout 6s; done
wait_live
bin/ringlog --broker "$b1" topic create backlog --partitions 4 --replication-factor 3 >/dev/null
echo "3 brokers on $b1..$((base + 3)); $(nproc) cores; load $(load)"

[ -n "${MAXRATE_RFS-1 3}" ] && echo "== (a) max-rate 1 KiB acks=all, ${measure} each after 3s warm-up" &&
  printf '%-4s %10s %12s  %s\n' RF pub_MB/s pub_p99_us load
for rf in ${MAXRATE_RFS-1 3}; do
  l=$(load)
  run "$dir/a$rf.txt" "$dir/max-rate-acks-all.yaml" --replication-factor "$rf" --duration "$measure" --warmup 3s
  printf '%-4s %10s %12s  %s\n' "$rf" "$(mbps "$dir/a$rf.txt")" "$(p99 "$dir/a$rf.txt")" "$l"
done

echo "== (b) fixed rate $rate msg/s 1 KiB acks=all RF=3, ${measure}; ${backlog_mib} MiB backlog produced with node 3 down"
echo "   latencies in ms: p50/p99 from the actual send, p50i/p99i from the intended send time;"
echo "   cpu_s: CPU seconds of brokers 1, 2, 3 in the window; psi: share of the window some task waited for CPU / for I/O (machine-wide)"
printf '%-16s %9s %7s %7s %7s %8s %16s %9s  %s\n' case catchup_s p50 p99 p50i p99i cpu_s_n1/n2/n3 psi_cpu/io load
# cpu_of PID: utime+stime in clock ticks; psi_total RESOURCE: the "some" stall total in µs
cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
psi_total() { awk '/^some/ { sub(/total=/, "", $5); print $5 }' "/proc/pressure/$1" 2>/dev/null || echo 0; }
tick=$(getconf CLK_TCK)
row() { # row CASE CATCHUP OUT: one line of the table from a bench run's output and the window's counters
  local out=$3
  local cpus="" n
  for n in 1 2 3; do cpus+="${cpus:+/}$(awk -v a="${c0[$n]}" -v b="$(cpu_of "${pids[$n]}")" -v t="$tick" 'BEGIN { printf "%.1f", (b - a) / t }')"; done
  local secs; secs=$(awk -v a="$w0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  local psi; psi="$(awk -v a="$pc0" -v b="$(psi_total cpu)" -v s="$secs" 'BEGIN { printf "%.0f%%", (b - a) / 1e4 / s }')/$(awk -v a="$pi0" -v b="$(psi_total io)" -v s="$secs" 'BEGIN { printf "%.0f%%", (b - a) / 1e4 / s }')"
  printf '%-16s %9s %7s %7s %7s %8s %16s %9s  %s\n' "$1" "$2" "$(ms "$(p50 "$out")")" "$(ms "$(p99 "$out")")" \
    "$(ms "$(p50i "$out")")" "$(ms "$(p99i "$out")")" "$cpus" "$psi" "$(load)"
}
declare -a curls
keep() { [ -n "${TRACE:-}" ] && cp "$(ls -t "$dir"/out/*.json | head -1)" "$TRACE/$1.json"; return 0; }
# settle: write back every dirty page first, so that a window does not also measure the
# writeback of what an earlier step wrote (the backlog fill, an earlier catch-up): the
# kernel starts it 30 s after the write (vm.dirty_expire_centisecs), often inside the
# next window. Prints how long it took.
settle() { local a; a=$(date +%s.%N); sync; awk -v a="$a" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
window_start() { w0=$(date +%s.%N); pc0=$(psi_total cpu); pi0=$(psi_total io); for n in 1 2 3; do c0[$n]=$(cpu_of "${pids[$n]}"); done; }
declare -a c0
ms() { awk -v u="$1" 'BEGIN { printf "%.1f", u / 1000 }'; }
p50() { awk '$1 == "publish" && $2 ~ /^[0-9]+$/ && $3 != "msg/s" { print $3 }' "$1"; }
p50i() { awk '$1 == "publish" && $2 == "(from" { print $5 }' "$1"; }

# In sync: no catch-up. No warm-up, like the catch-up windows (which must start as node 3
# does): every window includes the producers' start (topic creation, first metadata),
# which shows in the latency from the intended send time.
# The topic's creation (16 partitions, RF=3: leader elections, first metadata) happens in a
# short unreported run first, and every window reuses that topic (--topic-suffix; before
# it, each `bench run` created a topic of its own, and a catch-up window's creation right
# after node 3's restart stalled its producers ~1 s): every window starts on a warm topic.
run "$dir/create.txt" "$dir/fixed-rate-acks-all.yaml" --replication-factor 3 --topic-suffix catchup --rate "$rate" --duration 5s --warmup 0s
echo "   (topic created by a 5 s unreported run; sync before the window: $(settle) s)"
fsyncs insync 0; event "insync start"
window_start
run "$dir/insync.txt" "$dir/fixed-rate-acks-all.yaml" --replication-factor 3 --topic-suffix catchup --rate "$rate" --duration "$measure" --warmup 0s
event "insync end"; fsyncs insync 1; keep insync
row "in sync" - "$dir/insync.txt"
for t in 0 "$throttle"; do
  event "t$t kill"; kill -9 "${pids[3]}"; wait "${pids[3]}" 2>/dev/null || true
  # produce once node 3 is fenced and its leaderships have moved (--broker-session-timeout)
  for _ in $(seq 300); do [ "$(live)" = 2 ] && break; sleep 0.1; done
  # the backlog: 1 KiB lines into the RF=3 topic "backlog", acks=1, on nodes 1 and 2 only
  { yes "$(head -c 1023 /dev/zero | tr '\0' x)" || true; } | head -n $((backlog_mib * 1024)) |
    bin/ringlog --broker "$b1" produce backlog --acks 1 >"$dir/fill$t.txt" 2>&1 || { cat "$dir/fill$t.txt"; exit 1; }
  event "t$t backlog written"
  echo "   (backlog written; sync: $(settle) s)"
  flags=(--broker-session-timeout 6s)
  [ "$t" != 0 ] && flags+=(--replication-throttled-bytes-per-second "$t")
  event "t$t start 3"; start 3 "${flags[@]}"
  wait_live; event "t$t live"
  began=$(date +%s.%N)
  ( while [ "$(lagging)" != 0 ]; do sleep 0.2; done; date +%s.%N >"$dir/caught$t" ) &
  poller=$!
  if [ -n "${PROFILE:-}" ]; then # CPU profiles of nodes 1 and 3 over the first 5 s of the copy
    for n in 1 3; do curl -s -o "$PROFILE/catchup-t$t-node$n.pprof" "http://127.0.0.1:$((base + 20 + n))/debug/pprof/profile?seconds=5" & curls+=($!); done
  fi
  fsyncs "t$t" 0; event "t$t window start"
  if [ -n "${TRACE:-}" ]; then # the cluster's view over the window's first 3 s
    ( for i in $(seq 12); do { date +%s.%N; describe; } >>"$TRACE/t$t-describe.txt"; sleep 0.25; done ) &
  fi
  window_start
  run "$dir/during$t.txt" "$dir/fixed-rate-acks-all.yaml" --replication-factor 3 --topic-suffix catchup --rate "$rate" --duration "$measure" --warmup 0s
  event "t$t window end"; fsyncs "t$t" 1; keep "t$t"
  wait "$poller"; event "t$t caught up at $(cat "$dir/caught$t")"
  catchup=$(awk -v a="$began" -v b="$(cat "$dir/caught$t")" 'BEGIN { printf "%.1f", b - a }')
  name="unthrottled"
  [ "$t" != 0 ] && name="throttle $((t >> 20))MiB/s"
  row "$name" "$catchup" "$dir/during$t.txt"
done
for c in "${curls[@]}"; do wait "$c" || true; done
