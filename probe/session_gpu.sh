#!/usr/bin/env bash
# This session's device run: bandwidth before/after (old tree vs this one), then GPU tests.
set -u
export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/oldsite .oldtree >/dev/null 2>&1
echo "== bandwidth, old tree"; PYTHONPATH=/tmp/oldsite:/tmp/site timeout 150 python3 probe/bw_compare.py $OUT/bw_old.json ${BW_SHAPES:-}
echo "== bandwidth, this tree"; timeout 150 python3 probe/bw_compare.py $OUT/bw_new.json ${BW_SHAPES:-}
echo "== gpu tests"
timeout ${TEST_TIMEOUT:-280} python3 -m pytest -q -m gpu -p no:cacheprovider -x "$@" 2>&1 | tail -25
