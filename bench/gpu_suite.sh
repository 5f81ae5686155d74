#!/usr/bin/env bash
# The GPU checks, in one run on a machine with an NVIDIA GPU and no network:
#   bash bench/gpu_suite.sh [pytest args...]
# Installs wheels carried in .whl/ (lark), makes tilec importable from this checkout,
# runs the gpu-marked tests and every example; logs go to $OUT (or /tmp/tilec-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tilec-gpu}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# The package maps dsl/ to `tilec`; a symlink tree gives the same layout without pip.
rm -rf /tmp/tl && mkdir -p /tmp/tl && cp -rs "$PWD/dsl" /tmp/tl/tilec
for sub in lowering runtime stdlib_kernels; do ln -s "$PWD/$sub" "/tmp/tl/tilec/$sub"; done
export PYTHONPATH=/tmp/tl:$PYTHONPATH PYTHONUNBUFFERED=1 TILEC_CACHE_DIR=/tmp/tilec-cache
python3 -c "import tilec, tilec.lowering, tilec.runtime, tilec.stdlib_kernels; print('tilec', tilec.__version__, tilec.runtime.device_name())" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
status=0
# pytest-xdist where installed: one worker per core, a test file's tests on one worker (the
# compiles are the CPU's work; 1628 gpu tests took ~5 minutes at 14 workers on one H200)
par=()
case " $* " in *" -n "*|*" -n"[0-9]*) ;;   # the caller's own worker count
  *) python3 -c "import xdist" 2>/dev/null && par=(-p xdist -n "${TILEC_GPU_WORKERS:-$(nproc)}" --dist loadfile) ;;
esac
python3 -m pytest -q -p no:cacheprovider -m gpu "${par[@]}" "$@" 2>&1 | tee "$OUT/pytest-gpu.log" | tail -40 || status=1
for ex in examples/[a-z]*.py; do
  echo "== $ex"; timeout 300 python3 "$ex" 2>&1 | tail -5 || status=1
done
exit $status
