#!/usr/bin/env bash
# Runs franz-go's own pkg/kgo test suite (the client's integration tests, written against
# Apache Kafka) against ringlogd's Kafka listener and reports which top-level tests passed,
# failed and were skipped. Not part of `make test` or .ci/run: it takes minutes, and its
# failures are compatibility gaps to read, not regressions (docs/kafka-compatibility.md
# records the last result; the pass list should only grow).
#
#   bench/kgo-suite.sh                    run with the defaults below
#   KGO_TEST_RECORDS=5000 TIMEOUT=15m RUN='TestGroupETL|TestTxn' bench/kgo-suite.sh
#   KEEP=/tmp/kgo bench/kgo-suite.sh      also keep go test's JSON output and the broker log
#   SKIP= bench/kgo-suite.sh              skip nothing (default: '^TestTxn', the transaction
#                                         tests, which wait forever without transactions)
#
# It needs franz-go's source in the module cache (the version go.mod names; fetched with
# `go mod download github.com/twmb/franz-go`), copies it to a temp dir, starts ringlogd with
# --kafka-listen and --kafka-auto-create-topics on a fresh data dir, and runs
# `go test -json ./pkg/kgo` there with KGO_SEEDS pointing at it and KGO_TEST_RF=1.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${KGO_TEST_RECORDS:-10000}
timeout=${TIMEOUT:-20m}
run=${RUN:-.}
skip=${SKIP-^TestTxn}

go mod download github.com/twmb/franz-go
src=$(go list -m -f '{{.Dir}}' github.com/twmb/franz-go)
if [ -z "$src" ] || [ ! -d "$src/pkg/kgo" ]; then
  echo "franz-go source not in the module cache (go mod download github.com/twmb/franz-go)" >&2
  exit 2
fi
version=$(go list -m -f '{{.Version}}' github.com/twmb/franz-go)
go build -o bin/ ./cmd/ringlogd
dir=$(mktemp -d)
cp -r "$src" "$dir/franz-go" && chmod -R u+w "$dir/franz-go"
bin/ringlogd --data "$dir/data" --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 --kafka-auto-create-topics \
  --shard-ports off 2>"$dir/broker.log" &
broker=$!
trap 'kill $broker 2>/dev/null; wait $broker 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do grep -q "ringlogd started" "$dir/broker.log" && break; sleep 0.1; done
kafka=$(grep "ringlogd started" "$dir/broker.log" | sed 's/.* kafka=\([^ ]*\).*/\1/')
[ -n "$kafka" ] || { cat "$dir/broker.log"; exit 1; }
echo "franz-go $version pkg/kgo against ringlogd (Kafka $kafka), KGO_TEST_RF=1 KGO_TEST_RECORDS=$records, timeout $timeout, -skip '$skip'"

set +e
(cd "$dir/franz-go/pkg/kgo" && KGO_SEEDS=$kafka KGO_TEST_RF=1 KGO_TEST_RECORDS=$records \
  go test -json -count=1 -timeout "$timeout" -run "$run" -skip "$skip" . >"$dir/test.json" 2>"$dir/test.stderr")
status=$?
# Top-level tests only (subtests are counted with their parent).
for action in pass fail skip; do
  grep "\"Action\":\"$action\"" "$dir/test.json" | grep '"Test":"[^/"]*"' |
    sed 's/.*"Test":"\([^"]*\)".*/\1/' | sort -u >"$dir/$action.txt"
done
# A test that was running when the binary timed out or panicked has no result line.
grep '"Action":"run"' "$dir/test.json" | grep '"Test":"[^/"]*"' | sed 's/.*"Test":"\([^"]*\)".*/\1/' | sort -u >"$dir/ran.txt"
cat "$dir/pass.txt" "$dir/fail.txt" "$dir/skip.txt" | sort -u | comm -23 "$dir/ran.txt" - >"$dir/unfinished.txt"
printf 'passed %d, failed %d, skipped %d, unfinished %d (go test exit %d)\n' \
  "$(wc -l <"$dir/pass.txt")" "$(wc -l <"$dir/fail.txt")" "$(wc -l <"$dir/skip.txt")" "$(wc -l <"$dir/unfinished.txt")" "$status"
for action in pass fail skip unfinished; do
  echo "$action: $(tr '\n' ' ' <"$dir/$action.txt")"
done
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP" && cp "$dir/test.json" "$dir/test.stderr" "$dir/broker.log" "$KEEP/"
  echo "kept in $KEEP: test.json, test.stderr, broker.log"
fi
if grep -q 'panic: test timed out' "$dir/test.json" "$dir/test.stderr" 2>/dev/null; then
  echo "the suite hit its timeout ($timeout)"
fi
exit 0
