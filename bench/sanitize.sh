#!/usr/bin/env bash
# Every standard-library op on boundary shapes (bench/sanitize_ops.py) under each of
# compute-sanitizer's tools; prints one summary line per tool and the kernels named in
# its reports, and exits non-zero unless every tool reports 0 errors and 0 hazards.
#
#   bash bench/sanitize.sh [--quick] [--ops rowwise,matmul] [--tools memcheck,racecheck]
#
# API errors (CUDA calls that returned an error) are counted apart: those of a baseline
# process that only imports torch and initializes cuda-bindings' driver are not tilec's
# (cuda-bindings resolves every driver entry point it knows with cuGetProcAddress, and
# the driver answers CUDA_ERROR_INVALID_VALUE for those it lacks); any beyond the
# baseline's count are reported as tilec's and fail the run. Logs go to $SANITIZE_LOG_DIR
# (default: a temporary folder), one file per tool.
#
# initcheck runs on kernels compiled with TILEC_INITCHECK=1 (CompileOptions.initcheck: masked
# vector loads read no byte past their tensor's end); TILEC_INITCHECK=0 checks the default
# build instead, whose masked tails read the rest of a 16-byte group (docs/runtime.md).
set -uo pipefail
cd "$(dirname "$0")/.."

tools="memcheck,racecheck,synccheck,initcheck"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tools) tools="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -z "$sanitizer" ]; then
  echo "sanitize.sh: compute-sanitizer not found (it ships with the CUDA toolkit)" >&2
  exit 2
fi
logs=${SANITIZE_LOG_DIR:-$(mktemp -d)}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1 TILEC_CACHE_DIR=${TILEC_CACHE_DIR:-$logs/cache}

baseline_py='import torch; torch.zeros(1, device="cuda"); from cuda.bindings import driver; driver.cuInit(0)'
"$sanitizer" --tool memcheck python3 -c "$baseline_py" >"$logs/baseline.log" 2>&1
baseline=$(grep -c "Program hit" "$logs/baseline.log")
# compile every kernel once outside the sanitizer, so that the tools time launches, not LLVM
# (a wrong result fails the run at the end, but the tools still run: their findings may explain it)
status=0
jobs=$(nproc 2>/dev/null || echo 4)
python3 bench/sanitize_ops.py "${args[@]}" --jobs "$jobs" >"$logs/warm.log" 2>&1 ||
  { grep -E "FAILED|Error" "$logs/warm.log"; status=1; }
initcheck_mode=${TILEC_INITCHECK:-1}
if [[ ",$tools," == *,initcheck,* ]] && [ "$initcheck_mode" != 0 ]; then
  TILEC_INITCHECK=$initcheck_mode python3 bench/sanitize_ops.py "${args[@]}" --jobs "$jobs" >>"$logs/warm.log" 2>&1 ||
    { grep -E "FAILED|Error" "$logs/warm.log"; status=1; }
fi

printf '%-10s %8s %8s %10s  %s\n' tool errors hazards api-errors kernels
for tool in ${tools//,/ }; do
  extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  mode=0
  [ "$tool" = initcheck ] && mode=$initcheck_mode
  TILEC_INITCHECK=$mode "$sanitizer" --tool "$tool" "${extra[@]}" --print-limit 1000 python3 bench/sanitize_ops.py "${args[@]}" \
    >"$logs/$tool.log" 2>&1
  rc=$?
  errors=$(grep -oE "ERROR SUMMARY: [0-9]+" "$logs/$tool.log" | grep -oE "[0-9]+" | tail -n 1)
  hazards=$(grep -oE "RACECHECK SUMMARY: [0-9]+ hazard" "$logs/$tool.log" | grep -oE "[0-9]+" | tail -n 1)
  api=$(grep -c "Program hit" "$logs/$tool.log")
  # per-process API errors beyond the baseline's (the tool counts them among its errors)
  ours=$((api > baseline ? api - baseline : 0))
  # "at KERNEL+0x1f0 in FILE.py:LINE" (with line info) or "in KERNEL" / "kernel KERNEL"
  kernels=$(grep -oE "(at [A-Za-z_0-9]+\+0x|(in|kernel) [a-z_0-9]+_kernel)" "$logs/$tool.log" |
            sed -E 's/^(at|in|kernel) //; s/\+0x$//' | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')
  real=$(( ${errors:-0} - api ))
  printf '%-10s %8s %8s %10s  %s\n' "$tool" "$real" "${hazards:-0}" "$ours" "${kernels:--}"
  if [ "$rc" -ne 0 ] && [ -z "$errors" ]; then
    echo "sanitize.sh: $tool run failed (exit $rc); see $logs/$tool.log" >&2
    tail -n 20 "$logs/$tool.log" >&2
    status=1
  fi
  if [ "$real" -ne 0 ] || [ "${hazards:-0}" -ne 0 ] || [ "$ours" -ne 0 ]; then
    status=1
  fi
done
echo "baseline API errors (torch + cuda-bindings, not tilec's): $baseline per process; logs in $logs"
exit $status
