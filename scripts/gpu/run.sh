#!/usr/bin/env bash
# The GPU kit, part 2: runs on a machine with an NVIDIA GPU from the folder that
# scripts/gpu/bundle.sh made (.gpu/), with no cargo and no network. Every binary runs against
# the real libcuda (OFFLOAD_CUDA_REAL=1) under a timeout of its own, inside one overall
# budget; then a report goes to $OUT/gpu-report.md (when OUT is set; else .gpu/gpu-report.md)
# with every log in gpu-logs.txt beside it, and a summary is printed as the last lines.
#
#   bash .gpu/run.sh              run everything (on a machine without a GPU: list, skip, exit 0)
#   bash .gpu/run.sh --list       list the planned checks and exit
#   bash .gpu/run.sh --fake DIR   dry run against offload's protocol fake libcuda in DIR
#                                 (checks the kit itself here; proves nothing about a GPU)
#
# Environment: KIT_BUDGET_S (default 540) bounds the whole run; checks that would start
# after it are reported as not run.
set -uo pipefail
KIT=$(cd "$(dirname "$0")" && pwd)
BIN=$KIT/bin
BUDGET=${KIT_BUDGET_S:-540}
START=$(date +%s)

mode=gpu
fake_dir=
case "${1:-}" in
    --list) mode=list ;;
    --fake) mode=fake; fake_dir=$(cd "${2:?--fake needs the directory of the fake driver}" && pwd) ;;
    "") ;;
    *) echo "usage: $0 [--list | --fake DIR]" >&2; exit 2 ;;
esac

# The plan: name | timeout (s) | what | command (run from $BIN). The slowest and least
# telling checks (dlopen cycles, the sanitizer) go last, so a budget cut drops them first.
PLAN=(
    "info|30|device and driver (offload-info)|./offload-info"
    "probe|60|the CUDA platform opens and lists the GPU|./probe --nocapture"
    "cuda-cases|300|conformance (fixed + 256 cases), 8 threads x 25 runtimes, memory kinds, fixture kernels, queues, bad images, OOM, IPC between two processes|./fake_backend --test-threads=4 --nocapture"
    "nvrtc|120|NVRTC: CUDA C++ compiled, loaded and launched; compile errors with NVRTC's log|./nvrtc_fake --test-threads=2 --nocapture"
    "bench|180|offload against raw driver calls, paired|./raw_pair"
    "babelstream|120|BabelStream's five f64 kernels (N = 2^25, 5 rounds of 100 iterations a side), offload against raw driver calls on the same PTX, verified|./babelstream"
    "dlpack|120|DLPack on CUDA memory with CuPy and PyTorch, both ways, no copy (Python)|DLPACK"
    "facade|240|the facade's tests built with the cuda feature|FACADE"
    "dlopen|240|200 dlopen/init/launch/shutdown/dlclose cycles of the embedding library, unmapped each time|./dlopen --test-threads=1 --nocapture --skip hip_fake --skip ze_fake"
    "sanitizer|300|compute-sanitizer memcheck (leak check) over the conformance suite|SANITIZER"
)
FACADE_TESTS=(after_shutdown bad_input lifecycle_stress reinit deinit_errors ipc_handles)

list_plan() {
    local prefix=$1 entry name what
    for entry in "${PLAN[@]}"; do
        IFS='|' read -r name _ what _ <<<"$entry"
        echo "$prefix$name: $what"
    done
}

if [[ $mode == list ]]; then
    list_plan ""
    exit 0
fi

REPORT_DIR=${OUT:-$KIT}
mkdir -p "$REPORT_DIR"
REPORT_DIR=$(cd "$REPORT_DIR" && pwd)
REPORT=$REPORT_DIR/gpu-report.md
LOGS=$REPORT_DIR/gpu-logs.txt
: >"$LOGS"

if [[ $mode == gpu ]]; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
        {
            echo "# offload GPU kit: no NVIDIA GPU here"
            echo
            echo "No NVIDIA GPU or driver on this machine (\`nvidia-smi -L\` fails): every check skipped."
            echo
            list_plan "- SKIPPED "
        } >"$REPORT"
        list_plan "SKIPPED "
        echo "GPU KIT: no NVIDIA GPU here; ${#PLAN[@]} checks skipped (report: $REPORT)"
        exit 0
    fi
    # NVRTC comes with the toolkit, often outside the loader's path.
    if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
        for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
            $(ls -d /usr/local/cuda-*/lib64 2>/dev/null) \
            $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cuda_nvrtc", "lib") for p in nvidia.__path__))' 2>/dev/null) \
            $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
            if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then
                export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
                break
            fi
        done
    fi
else
    export LD_LIBRARY_PATH=$fake_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export OFFLOAD_BENCH_COPY_BYTES=${OFFLOAD_BENCH_COPY_BYTES:-$((16 << 20))}
fi

export OFFLOAD_CUDA_REAL=1
unset CI # skips here are the kit's to report, not failures of a CI run
export OFFLOAD_CACHE_DIR=${OFFLOAD_CACHE_DIR:-$(mktemp -d)}

declare -A STATUS SECONDS_TAKEN
cd "$BIN" || exit 1

run_one() {
    local name=$1 limit=$2 command=$3 skipped=
    local now=$(($(date +%s) - START))
    if ((now + 10 > BUDGET)); then
        STATUS[$name]="not run (budget of ${BUDGET}s spent)"
        return
    fi
    ((limit > BUDGET - now)) && limit=$((BUDGET - now))
    local t0=$(date +%s) rc
    {
        echo
        echo "===== $name: $command (timeout ${limit}s)"
    } >>"$LOGS"
    case $command in
        FACADE)
            rc=0
            for t in "${FACADE_TESTS[@]}"; do
                echo "----- $t" >>"$LOGS"
                timeout -k 5 "$limit" "./$t" --test-threads=2 --nocapture >>"$LOGS" 2>&1 || rc=$?
            done
            ;;
        DLPACK)
            # The kit's package first on the path; the machine's Python (CuPy, PyTorch).
            local out
            out=$(mktemp)
            PYTHONPATH=$KIT/python${PYTHONPATH:+:$PYTHONPATH} timeout -k 5 "$limit" \
                "${OFFLOAD_KIT_PYTHON:-python3}" "$KIT/dlpack_gpu.py" >"$out" 2>&1
            rc=$?
            cat "$out" >>"$LOGS"
            # A library that is not installed is a skip to report, not a pass.
            skipped=$(sed -n 's/^SKIP \([a-z]*\):.*/\1/p' "$out" | paste -sd, -)
            rm -f "$out"
            ;;
        SANITIZER)
            if ! command -v compute-sanitizer >/dev/null 2>&1; then
                STATUS[$name]="skipped (no compute-sanitizer)"
                echo "compute-sanitizer not found" >>"$LOGS"
                return
            fi
            # A short suite: under the sanitizer every driver call is slowed many times.
            OFFLOAD_CONFORMANCE_CASES=16 timeout -k 5 "$limit" compute-sanitizer --tool memcheck --leak-check full \
                --target-processes all --error-exitcode 86 \
                ./fake_backend --exact conformance_passes_on_the_fake_with_no_protocol_violation \
                --nocapture >>"$LOGS" 2>&1
            rc=$?
            ;;
        *)
            timeout -k 5 "$limit" $command >>"$LOGS" 2>&1
            rc=$?
            ;;
    esac
    SECONDS_TAKEN[$name]=$(($(date +%s) - t0))
    case $rc in
        0) STATUS[$name]=passed${skipped:+ (skipped: $skipped)} ;;
        124 | 137) STATUS[$name]="FAILED (timed out after ${limit}s)" ;;
        86) STATUS[$name]="FAILED (compute-sanitizer found errors)" ;;
        *) STATUS[$name]="FAILED (exit $rc)" ;;
    esac
    echo "[$(($(date +%s) - START))s] $name: ${STATUS[$name]}"
}

for entry in "${PLAN[@]}"; do
    IFS='|' read -r name limit _ command <<<"$entry"
    run_one "$name" "$limit" "$command"
done

# ---- the report ------------------------------------------------------------------------
device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
[[ -z $device && $mode == fake ]] && device="offload's protocol fake libcuda (no GPU)"
passed_tests=$(grep -cE '^test .* \.\.\. ok$' "$LOGS")
failed_tests=$(grep -E '^test .* \.\.\. FAILED$' "$LOGS" | sed 's/^test //; s/ \.\.\. FAILED$//')
skips=$(grep -E '^SKIP' "$LOGS" | sort | uniq -c | sed 's/^ */    /')
cases=$(grep -m1 -oE 'offload conformance: fixed tests and [0-9]+ state-machine cases.*' "$LOGS" || true)
{
    echo "# offload GPU kit report"
    echo
    echo "- when: $(date -u +%Y-%m-%dT%H:%M:%SZ)$([[ $mode == fake ]] && echo ' — DRY RUN on the protocol fake, not a GPU')"
    echo "- device: $device"
    echo "- kit: $(head -1 "$KIT/MANIFEST" | sed 's/^# //')"
    echo "- tests passed: $passed_tests; failed: $(echo -n "$failed_tests" | grep -c .)"
    [[ -n $cases ]] && echo "- $cases"
    echo
    echo "| check | result | seconds | what |"
    echo "|---|---|---|---|"
    for entry in "${PLAN[@]}"; do
        IFS='|' read -r name _ what _ <<<"$entry"
        echo "| $name | ${STATUS[$name]:-not run} | ${SECONDS_TAKEN[$name]:-} | $what |"
    done
    echo
    echo "## offload-info"
    echo
    echo '```'
    sed -n '/===== info:/,/===== probe:/p' "$LOGS" | sed '1d;$d' | head -60
    echo '```'
    echo
    echo "## offload / raw driver (medians, ns per operation)"
    echo
    echo "| operation | offload | raw | ratio |"
    echo "|---|---|---|---|"
    grep '^PAIR ' "$LOGS" | sed -E 's/^PAIR ([^ ]+) offload=([0-9]+) raw=([0-9]+) ratio=([0-9.]+)/| \1 | \2 | \3 | \4 |/'
    grep '^BANDWIDTH ' "$LOGS" | sed 's/^/\n/'
    if grep -q '^BABEL ' "$LOGS"; then
        echo
        echo "## BabelStream, f64 (MB/s: medians over rounds of each round's best; ratio: median of offload/raw)"
        echo
        grep -E '^(BABELSTREAM|BABEL_PEAK|BABEL_NOTE) ' "$LOGS" | sed 's/^/- /'
        echo
        echo "| kernel | offload MB/s | raw MB/s | ratio | offload / theoretical peak |"
        echo "|---|---|---|---|---|"
        grep '^BABEL ' "$LOGS" | sed -E 's/^BABEL ([^ ]+) offload=([0-9]+) raw=([0-9]+) ratio=([0-9.]+) peak=([0-9.]+|n\/a)/| \1 | \2 | \3 | \4 | \5 |/'
        grep '^FAILED verification' "$LOGS" | sed 's/^/\n**/; s/$/**/'
    fi
    if [[ -n $failed_tests ]]; then
        echo
        echo "## failed tests"
        echo
        echo "$failed_tests" | sed 's/^/- /'
    fi
    if [[ -n $skips ]]; then
        echo
        echo "## skipped inside the binaries"
        echo
        echo '```'
        echo "$skips"
        echo '```'
    fi
} >"$REPORT"

ok=0 bad=0
for entry in "${PLAN[@]}"; do
    IFS='|' read -r name _ _ _ <<<"$entry"
    case ${STATUS[$name]:-not run} in
        passed) ok=$((ok + 1)) ;;
        FAILED*) bad=$((bad + 1)) ;;
    esac
done
cat "$REPORT"
echo
echo "GPU KIT SUMMARY ($mode): $ok of ${#PLAN[@]} checks passed, $bad failed; $passed_tests tests ok; device: $device"
echo "report: $REPORT; logs: $LOGS"
((bad == 0))
