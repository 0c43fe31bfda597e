#!/usr/bin/env bash
# Kafka client vs bundled client on the same workload, same broker, same run: starts one
# ringlogd with --kafka-listen on a temp data dir, then runs WORKLOAD with `ringlog bench run
# --driver ringlog` (the bundled client, ringlog protocol) and `--driver kgo` (franz-go's kgo,
# Kafka protocol) alternately, ROUNDS times, and prints per run: publish and consume MB/s,
# for a catch-up workload the backlog read MB/s (fetch alone), the client's and the broker's
# CPU seconds (whole run, warm-up and backlog fill included) and the load average, then
# each round's kgo/ringlog ratios. docs/benchmarks.md records results.
#
#   bench/kafka-vs-bundled.sh [WORKLOAD]        (default bench/workloads/max-rate-1kib.yaml)
#   ROUNDS=3 DURATION=10s WARMUP=3s bench/kafka-vs-bundled.sh
set -euo pipefail
cd "$(dirname "$0")/.."
workload=${1:-bench/workloads/max-rate-1kib.yaml}
rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
warmup=${WARMUP:-3s}

go build -o bin/ ./cmd/...
dir=$(mktemp -d)
bin/ringlogd --data "$dir/data" --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 --shard-ports off 2>"$dir/broker.log" &
broker=$!
trap 'kill $broker 2>/dev/null; wait $broker 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do grep -q "ringlogd started" "$dir/broker.log" && break; sleep 0.1; done
line=$(grep "ringlogd started" "$dir/broker.log") || { cat "$dir/broker.log"; exit 1; }
listen=$(sed 's/.* listen=\([^ ]*\).*/\1/' <<<"$line")
kafka=$(sed 's/.* kafka=\([^ ]*\).*/\1/' <<<"$line")
echo "ringlogd pid $broker: ringlog protocol $listen, Kafka $kafka; workload $workload, $rounds rounds of ${warmup} + ${duration}"

cpu() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }
printf '%-6s %-8s %10s %10s %10s %11s %11s  %s\n' round driver pub_MB/s con_MB/s backlog_rd client_cpu broker_cpu load
declare -A pub con backlog
for round in $(seq "$rounds"); do
  for driver in ringlog kgo; do
    addr=$listen
    [ "$driver" = kgo ] && addr=$kafka
    load=$(cut -d' ' -f1 /proc/loadavg)
    before=$(cpu "$broker")
    TIMEFORMAT='%U %S'
    { time bin/ringlog bench run --driver "$driver" --broker "$addr" --broker-pid "$broker" \
        --duration "$duration" --warmup "$warmup" --out "$dir/out" "$workload" >"$dir/run.txt" 2>&1 ; } 2>"$dir/time.txt"
    after=$(cpu "$broker")
    client=$(awk '{printf "%.2f", $1 + $2}' "$dir/time.txt")
    p=$(awk '/^publish /{print $4}' "$dir/run.txt")
    c=$(awk '/^consume /{print $4}' "$dir/run.txt")
    b=$(sed -n 's/.*read in [0-9.]*s (\([0-9]*\) MB\/s).*/\1/p' "$dir/run.txt")
    pub[$round,$driver]=$p con[$round,$driver]=$c backlog[$round,$driver]=${b:--}
    printf '%-6s %-8s %10s %10s %10s %11s %11s  %s\n' "$round" "$driver" "$p" "$c" "${b:--}" "$client" \
      "$(awk -v a="$after" -v b="$before" 'BEGIN{printf "%.2f", a - b}')" "$load"
  done
done
for round in $(seq "$rounds"); do
  awk -v kp="${pub[$round,kgo]}" -v rp="${pub[$round,ringlog]}" -v kc="${con[$round,kgo]}" -v rc="${con[$round,ringlog]}" \
    -v kb="${backlog[$round,kgo]}" -v rb="${backlog[$round,ringlog]}" -v n="$round" \
    'BEGIN{printf "round %d: kgo/ringlog publish %.2f, consume %.2f", n, kp / rp, kc / rc
           if (kb != "-" && rb != "-" && rb > 0) printf ", backlog read %.2f", kb / rb
           printf "\n"}'
done
