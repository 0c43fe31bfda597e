#!/usr/bin/env bash
# Kafka client vs bundled client on the same workload, same broker build and flags, same
# rounds: runs WORKLOAD with `ringlog bench run --driver ringlog` (the bundled client,
# ringlog protocol) and `--driver kgo` (franz-go's kgo, Kafka protocol), ROUNDS times,
# alternating which client goes first. Every run gets a fresh `ringlogd --kafka-listen` on an
# empty data directory (so no run inherits the previous one's segments, dirty pages or
# memory), and `sync` runs between runs so that one run's writeback does not land in the
# next. It samples the broker's and the client's CPU (/proc/PID/stat, every 0.2 s) and
# prints per run and per phase:
#   produce  the measured window of a workload with producers (publish MB/s), or for a
#            catch-up workload the backlog fill (produce alone, before any consumer);
#   fetch    a catch-up workload's backlog read (fetch alone: consumers read what the fill
#            wrote while producers add only producerRate);
#   consume  a workload whose consumers keep up with its producers (mixed: there both lines
#            count the client's and the broker's whole CPU in the window, producers and
#            consumers together, per GB of that line's bytes);
# with MB/s, the broker's and the client's CPU seconds per GB (10^9 B) in that phase, and the
# load average at the start; then the records per batch the run's producers wrote (read from
# the run's segment files: what a client's per-record cost is spread over). At the end, per
# phase: each round's kgo/ringlog throughput ratio, their median, min and max and how many
# rounds reached 0.90, and each client's median MB/s and CPU per GB.
# docs/benchmarks.md records results.
#
#   bench/kafka-vs-bundled.sh [WORKLOAD]        (default bench/workloads/max-rate-1kib.yaml)
#   ROUNDS=3 DURATION=10s WARMUP=3s bench/kafka-vs-bundled.sh
#   ROUNDS=4 DURATION=15s WARMUP=0s bench/kafka-vs-bundled.sh bench/workloads/fetch-only-1kib.yaml
#   AUTOGROUP_NICE=-10 ...             (the default) the runs' scheduling weight, see below
#   LOCK=/tmp/ringlog-bench.lock ...   hold this flock(1) lock for each round (both clients'
#        runs), not for the whole script: a long series leaves gaps for other measurements
#        (do not also wrap the script in flock on the same file: it would wait for itself)
#   DRIVERS="kgo kgo-x" ...            the two drivers (default "ringlog kgo"; ratios are
#        second/first; a driver whose name starts with kgo gets the Kafka listener); a
#        driver written DRIVER@BINARY runs against that ringlogd binary instead of the one
#        built here (an A/B of two broker builds: DRIVERS="kgo@/tmp/a/ringlogd kgo@/tmp/b/ringlogd")
#   BACKLOG=512MiB ...                 override a catch-up workload's backlogSize
#   PROFILE=DIR [PROFILE_AFTER=4] [PROFILE_SECONDS=5] [PROFILE_ADDR=127.0.0.1:16061] ...
#   (a PROFILE_SECONDS broker CPU profile per run, PROFILE_AFTER seconds into it, via
#   ringlogd --debug-addr, and the client's CPU profile of the whole run,
#   `ringlog bench run --cpuprofile`)
#
# Scheduling: with the kernel's autogroup scheduling on (/proc/sys/kernel/sched_autogroup_enabled,
# the default on desktop-configured kernels and on this machine), CPU is shared between
# sessions first and `nice` only orders processes within a session, so a build at nice 15 in
# another terminal gets as much CPU as this benchmark. The script therefore runs in a session
# of its own and sets that session's autogroup nice to AUTOGROUP_NICE (needs CAP_SYS_NICE for
# a negative value; "" leaves it alone), so the broker and the clients get the CPU first, as
# they would on a dedicated machine. It does not pin: the broker pins its shards itself (one
# per CPU) and neither client pins, as in every other bench/ script.
set -euo pipefail
if [ -z "${KAFKA_VS_BUNDLED_SESSION:-}" ]; then
  KAFKA_VS_BUNDLED_SESSION=1 exec setsid -w "$0" "$@"
fi
cd "$(dirname "$0")/.."
if [ -n "${AUTOGROUP_NICE--10}" ] && [ -w /proc/self/autogroup ]; then
  echo "${AUTOGROUP_NICE--10}" >/proc/self/autogroup || echo "could not set the autogroup nice to ${AUTOGROUP_NICE--10}" >&2
fi
workload=${1:-bench/workloads/max-rate-1kib.yaml}
rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
warmup=${WARMUP:-3s}
read -r -a drivers <<<"${DRIVERS:-ringlog kgo}"
profile=${PROFILE:-}

go build -o bin/ ./cmd/...
dir=$(mktemp -d)
pprof_flag=()
[ -n "$profile" ] && { mkdir -p "$profile"; pprof_flag=(--debug-addr "${PROFILE_ADDR:-127.0.0.1:16061}"); }
broker=
sampler=
stop_broker() {
  [ -n "$broker" ] && { kill "$broker" 2>/dev/null; wait "$broker" 2>/dev/null || true; }
  broker=
}
trap '[ -n "$sampler" ] && kill "$sampler" 2>/dev/null; stop_broker; rm -rf "$dir"' EXIT
# set -e ends the script on a failed command: say which (a full disk has done it).
trap 'echo "kafka-vs-bundled.sh: line $LINENO: exit status $? ($(df -h --output=avail "$dir" | tail -1 | tr -d " ") free)" >&2' ERR
# start_broker [BINARY]: a fresh ringlogd (default bin/ringlogd) on an empty data
# directory; sets broker, listen and kafka.
start_broker() {
  rm -rf "$dir/data"
  sync
  "${1:-bin/ringlogd}" --data "$dir/data" --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 --shard-ports off --admin "" "${pprof_flag[@]}" 2>"$dir/broker.log" &
  broker=$!
  for _ in $(seq 100); do grep -q "ringlogd started" "$dir/broker.log" && break; sleep 0.1; done
  local line
  line=$(grep "ringlogd started" "$dir/broker.log") || { cat "$dir/broker.log"; exit 1; }
  listen=$(sed 's/.* listen=\([^ ]*\).*/\1/' <<<"$line")
  kafka=$(sed 's/.* kafka=\([^ ]*\).*/\1/' <<<"$line")
}
if [ -n "${BACKLOG:-}" ]; then
  sed "s/^backlogSize:.*/backlogSize: $BACKLOG/" "$workload" >"$dir/workload.yaml"
  workload=$dir/workload.yaml
fi
echo "workload $workload, $rounds rounds of ${warmup} + ${duration}, a fresh ringlogd per run; $(nproc) CPUs, go $(go env GOVERSION), $(cat /proc/self/autogroup 2>/dev/null || echo 'no autogroup')"

# sample PID...: "epoch-seconds ticks..." every 0.2 s (utime+stime; 0 once a process is gone).
sample() {
  set +e # a failed write (a full disk) must not end the sampler before the run does
  local pid f
  while :; do
    local line=$EPOCHREALTIME
    for pid in "$@"; do
      if { read -r -a f <"/proc/$pid/stat"; } 2>/dev/null; then line+=" $((f[13] + f[14]))"; else line+=" 0"; fi
    done
    echo "$line"
    sleep 0.2
  done
}

# phases RESULT.json SAMPLES: one line per phase, "phase MB/s broker_s/GB client_s/GB".
phases() {
  python3 - "$1" "$2" "$(getconf CLK_TCK)" <<'PY'
import json, sys, datetime
r = json.load(open(sys.argv[1])); tck = float(sys.argv[3])
rows = [list(map(float, l.split())) for l in open(sys.argv[2]) if len(l.split()) == 3]
def cpu(col, t):  # interpolated CPU seconds at time t; a gone process keeps its last value
    prev = None
    for row in rows:
        if row[col] == 0 and prev: row[col] = prev[col]
        if row[0] >= t:
            if prev is None: return row[col] / tck
            f = (t - prev[0]) / max(row[0] - prev[0], 1e-9)
            return (prev[col] + f * (row[col] - prev[col])) / tck
        prev = row
    return prev[col] / tck
def out(name, t0, t1, nbytes):
    if t1 <= t0 or nbytes <= 0: return
    gb = nbytes / 1e9
    print("%s %.0f %.2f %.2f" % (name, nbytes / 1e6 / (t1 - t0), (cpu(1, t1) - cpu(1, t0)) / gb, (cpu(2, t1) - cpu(2, t0)) / gb))
s = r["started"].rstrip("Z")
s = (s + "000000")[:26] if "." in s else s
start = datetime.datetime.fromisoformat(s).replace(tzinfo=datetime.timezone.utc).timestamp()
b = r.get("backlog")
if b:
    out("produce", start, start + b["fill_seconds"], b["written_bytes"])
    if b["backlog_read_seconds"] > 0:
        t0 = start + b["fill_seconds"]
        out("fetch", t0, t0 + b["backlog_read_seconds"], b["written_bytes"])
else:
    t0 = start + r["warmup_seconds"]; t1 = t0 + r["test_seconds"]
    out("produce", t0, t1, r["publish"]["bytes"])
    if r["consume"]["bytes"] > 0 and r["publish"]["bytes"] > 0:
        out("consume", t0, t1, r["consume"]["bytes"])
PY
}

# batches DATA: records per batch and bytes per batch of the run's topics, from the record
# batch headers of their segment files.
batches() {
  python3 - "$1" <<'PY'
import os, struct, sys
data = sys.argv[1]
n = records = size = 0
for d in os.listdir(data):
    topic = d.rsplit("-", 1)[0]
    if not os.path.isdir(os.path.join(data, d)) or topic.startswith("__"): continue
    for f in os.listdir(os.path.join(data, d)):
        if not f.endswith(".log"): continue
        with open(os.path.join(data, d, f), "rb") as log:
            while True:
                h = log.read(27)  # base offset 8, length 4, epoch 4, magic 1, crc 4, attributes 2, last offset delta 4
                if len(h) < 27: break
                length, = struct.unpack_from(">i", h, 8)
                if length <= 0: break
                n += 1; size += 12 + length; records += struct.unpack_from(">i", h, 23)[0] + 1
                log.seek(12 + length - 27, 1)
if n: print("%.1f records/batch, %.0f bytes/batch" % (records / n, size / n))
PY
}

printf '%-6s %-8s %-8s %9s %13s %13s  %s\n' round driver phase MB/s broker_s/GB client_s/GB load
: >"$dir/rows"
lock=${LOCK:-}
for round in $(seq "$rounds"); do
  order=("${drivers[@]}")
  [ $((round % 2)) -eq 0 ] && order=("${drivers[1]}" "${drivers[0]}")
  [ -n "$lock" ] && { exec 9>"$lock"; flock 9; }
  for name in "${order[@]}"; do
    driver=${name%%@*}
    binary=
    [[ "$name" == *@* ]] && binary=${name#*@}
    start_broker "$binary"
    addr=$listen
    [[ "$driver" == kgo* ]] && addr=$kafka
    load=$(cut -d' ' -f1 /proc/loadavg)
    rm -rf "$dir/out"
    cpuprofile=()
    tag=$driver
    [ -n "$binary" ] && tag=$driver-$(basename "$(dirname "$binary")")
    [ -n "$profile" ] && cpuprofile=(--cpuprofile "$profile/client-$tag-$round.pprof")
    bin/ringlog bench run --driver "$driver" --broker "$addr" --broker-pid "$broker" "${cpuprofile[@]}" \
      --duration "$duration" --warmup "$warmup" --out "$dir/out" "$workload" >"$dir/run.txt" 2>&1 &
    client=$!
    sample "$broker" "$client" >"$dir/samples.txt" &
    sampler=$!
    if [ -n "$profile" ]; then
      sleep "${PROFILE_AFTER:-4}"
      curl -s -o "$profile/broker-$tag-$round.pprof" "http://${PROFILE_ADDR:-127.0.0.1:16061}/debug/pprof/profile?seconds=${PROFILE_SECONDS:-5}" || true
    fi
    if ! wait "$client"; then
      cat "$dir/run.txt"
      kill -0 "$broker" 2>/dev/null || echo "ringlogd (pid $broker) is gone; its log:"
      tail -20 "$dir/broker.log"
      exit 1
    fi
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    sampler=
    while read -r phase mbs bcpu ccpu; do
      echo "$round $name $phase $mbs $bcpu $ccpu $load" >>"$dir/rows"
      printf '%-6s %-8s %-8s %9s %13s %13s  %s\n' "$round" "$name" "$phase" "$mbs" "$bcpu" "$ccpu" "$load"
    done < <(phases "$dir/out/"*.json "$dir/samples.txt")
    echo "       $name wrote $(batches "$dir/data")"
    stop_broker
  done
  [ -n "$lock" ] && exec 9>&-
done
python3 - "$dir/rows" "${drivers[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
first, second = sys.argv[2], sys.argv[3]
by = {(r[0], r[1], r[2]): tuple(map(float, r[3:6])) for r in rows}
rounds = sorted({r[0] for r in rows}, key=int)
for phase in ("produce", "fetch", "consume"):
    ratios = [by[(n, second, phase)][0] / by[(n, first, phase)][0] for n in rounds
              if (n, second, phase) in by and (n, first, phase) in by and by[(n, first, phase)][0] > 0]
    if not ratios: continue
    print("%-8s %s/%s per round: %s" % (phase, second, first, " ".join("%.2f" % x for x in ratios)))
    print("%-8s %s/%s median %.3f, min %.2f, max %.2f, %d of %d rounds >= 0.90" % (
        phase, second, first, statistics.median(ratios), min(ratios), max(ratios), sum(x >= 0.9 for x in ratios), len(ratios)))
    for d in (first, second):
        v = [by[(n, d, phase)] for n in rounds if (n, d, phase) in by]
        print("%-8s %-7s median %4.0f MB/s (%.0f-%.0f), broker %.2f s/GB, client %.2f s/GB" % (
            phase, d, statistics.median(x[0] for x in v), min(x[0] for x in v), max(x[0] for x in v),
            statistics.median(x[1] for x in v), statistics.median(x[2] for x in v)))
PY
