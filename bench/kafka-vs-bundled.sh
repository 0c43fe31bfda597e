#!/usr/bin/env bash
# Kafka client vs bundled client on the same workload, same broker, same run: starts one
# ringlogd with --kafka-listen on a temp data dir, then runs WORKLOAD with `ringlog bench run
# --driver ringlog` (the bundled client, ringlog protocol) and `--driver kgo` (franz-go's kgo,
# Kafka protocol), ROUNDS times, alternating which client goes first. It samples the broker's
# and the client's CPU (/proc/PID/stat, every 0.2 s) and prints per run and per phase:
#   produce  the measured window of a workload with producers (publish MB/s), or for a
#            catch-up workload the backlog fill (produce alone, before any consumer);
#   fetch    a catch-up workload's backlog read (fetch alone: consumers read what the fill
#            wrote while producers add only producerRate);
#   consume  a workload whose consumers keep up with its producers (mixed: there both lines
#            count the client's and the broker's whole CPU in the window, producers and
#            consumers together, per GB of that line's bytes);
# with MB/s, the broker's and the client's CPU seconds per GB (10^9 B) in that phase, and the
# load average at the start; then the records per batch the run's producers wrote (read from
# the run's segment files: what a client's per-record cost is spread over); then each round's
# kgo/ringlog throughput ratios.
# docs/benchmarks.md records results.
#
#   bench/kafka-vs-bundled.sh [WORKLOAD]        (default bench/workloads/max-rate-1kib.yaml)
#   ROUNDS=3 DURATION=10s WARMUP=3s bench/kafka-vs-bundled.sh
#   ROUNDS=4 DURATION=15s WARMUP=0s bench/kafka-vs-bundled.sh bench/workloads/fetch-only-1kib.yaml
#   PROFILE=DIR [PROFILE_AFTER=4] [PROFILE_ADDR=127.0.0.1:16061] ...   (a 5 s broker CPU
#   profile per run, PROFILE_AFTER seconds into it, via ringlogd --debug-addr)
set -euo pipefail
cd "$(dirname "$0")/.."
workload=${1:-bench/workloads/max-rate-1kib.yaml}
rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
warmup=${WARMUP:-3s}
drivers=(ringlog kgo)
profile=${PROFILE:-}

go build -o bin/ ./cmd/...
dir=$(mktemp -d)
pprof_flag=()
[ -n "$profile" ] && { mkdir -p "$profile"; pprof_flag=(--debug-addr "${PROFILE_ADDR:-127.0.0.1:16061}"); }
bin/ringlogd --data "$dir/data" --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 --shard-ports off --admin "" "${pprof_flag[@]}" 2>"$dir/broker.log" &
broker=$!
trap 'kill $broker 2>/dev/null; wait $broker 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do grep -q "ringlogd started" "$dir/broker.log" && break; sleep 0.1; done
line=$(grep "ringlogd started" "$dir/broker.log") || { cat "$dir/broker.log"; exit 1; }
listen=$(sed 's/.* listen=\([^ ]*\).*/\1/' <<<"$line")
kafka=$(sed 's/.* kafka=\([^ ]*\).*/\1/' <<<"$line")
echo "ringlogd pid $broker: ringlog protocol $listen, Kafka $kafka; workload $workload, $rounds rounds of ${warmup} + ${duration}"

# sample PID...: "epoch-seconds ticks..." every 0.2 s (utime+stime; 0 once a process is gone).
sample() {
  local pid f
  while :; do
    local line=$EPOCHREALTIME
    for pid in "$@"; do
      if read -r -a f <"/proc/$pid/stat" 2>/dev/null; then line+=" $((f[13] + f[14]))"; else line+=" 0"; fi
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

# batches DATA SEEN: records per batch and bytes per batch of the topics not in SEEN (the
# run's), from the record batch headers of their segment files; adds them to SEEN.
batches() {
  python3 - "$1" "$2" <<'PY'
import os, struct, sys
data, seen_file = sys.argv[1], sys.argv[2]
seen = set(open(seen_file).read().split()) if os.path.exists(seen_file) else set()
n = records = size = 0
new = set()
for d in os.listdir(data):
    topic = d.rsplit("-", 1)[0]
    if not os.path.isdir(os.path.join(data, d)) or topic.startswith("__") or topic in seen: continue
    new.add(topic)
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
open(seen_file, "a").write("".join(t + "\n" for t in new))
if n: print("%.1f records/batch, %.0f bytes/batch" % (records / n, size / n))
PY
}

printf '%-6s %-8s %-8s %9s %13s %13s  %s\n' round driver phase MB/s broker_s/GB client_s/GB load
declare -A rate
for round in $(seq "$rounds"); do
  order=("${drivers[@]}")
  [ $((round % 2)) -eq 0 ] && order=("${drivers[1]}" "${drivers[0]}")
  for driver in "${order[@]}"; do
    addr=$listen
    [ "$driver" = kgo ] && addr=$kafka
    load=$(cut -d' ' -f1 /proc/loadavg)
    rm -rf "$dir/out"
    bin/ringlog bench run --driver "$driver" --broker "$addr" --broker-pid "$broker" \
      --duration "$duration" --warmup "$warmup" --out "$dir/out" "$workload" >"$dir/run.txt" 2>&1 &
    client=$!
    sample "$broker" "$client" >"$dir/samples.txt" &
    sampler=$!
    if [ -n "$profile" ]; then
      sleep "${PROFILE_AFTER:-4}"
      curl -s -o "$profile/broker-$driver-$round.pprof" "http://${PROFILE_ADDR:-127.0.0.1:16061}/debug/pprof/profile?seconds=5" || true
    fi
    wait "$client" || { cat "$dir/run.txt"; exit 1; }
    kill "$sampler"; wait "$sampler" 2>/dev/null || true
    while read -r phase mbs bcpu ccpu; do
      rate[$round,$driver,$phase]=$mbs
      printf '%-6s %-8s %-8s %9s %13s %13s  %s\n' "$round" "$driver" "$phase" "$mbs" "$bcpu" "$ccpu" "$load"
    done < <(phases "$dir/out/"*.json "$dir/samples.txt")
    echo "       $driver wrote $(batches "$dir/data" "$dir/seen")"
  done
done
for round in $(seq "$rounds"); do
  line="round $round: kgo/ringlog"
  for phase in produce fetch consume; do
    k=${rate[$round,kgo,$phase]:-} r=${rate[$round,ringlog,$phase]:-}
    [ -n "$k" ] && [ -n "$r" ] && line+=$(awk -v k="$k" -v r="$r" -v p="$phase" 'BEGIN{printf " %s %.2f", p, k / r}')
  done
  echo "$line"
done
