#!/usr/bin/env bash
# The flake hunt: the whole suite (README.md's test command, with --no-fail-fast) run N
# times in a row (default 5) while two CPU burners (`yes > /dev/null`) load the machine's
# cores, a result line per run and the failed tests of each. A test that fails here is a
# bug to find at its cause (docs/reliability.md), not a bound to widen.
#
#   bash scripts/loaded.sh [N]      logs in target/loaded/run-<k>.log
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
burners="${OFFLOAD_LOADED_BURNERS:-2}"
mkdir -p target/loaded
pids=()
for _ in $(seq "$burners"); do
    yes >/dev/null &
    pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
failed_runs=0
for k in $(seq "$runs"); do
    log="target/loaded/run-$k.log"
    start=$SECONDS
    bash scripts/test.sh -- --no-fail-fast >"$log" 2>&1
    rc=$?
    failures=$(grep -a -E '^test .* \.\.\. FAILED$' "$log" | sed 's/^test //; s/ \.\.\. FAILED$//' | paste -sd, -)
    passed=$(grep -a -cE '^test .* \.\.\. ok$' "$log")
    echo "loaded run $k of $runs: rc $rc, $passed tests ok, $((SECONDS - start)) s${failures:+; FAILED: $failures}"
    ((rc != 0)) && failed_runs=$((failed_runs + 1))
done
echo "loaded runs: $failed_runs of $runs failed (burners: $burners)"
((failed_runs == 0))
