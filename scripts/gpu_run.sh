#!/usr/bin/env bash
# One device call: GPU tests of the kernels, then the whole benchmark; logs and results under $OUT.
# Usage (device tool, carry=[".whl"]): bash scripts/gpu_run.sh [TEST_TIMEOUT_S] [BENCH_TIMEOUT_S] [BENCH_ARGS...]
set -o pipefail
test_s=${1:-240}; bench_s=${2:-330}; shift 2 2>/dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee $OUT/gpu_info.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a $OUT/gpu_info.txt
if [ "$test_s" != 0 ]; then
  timeout $test_s python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_gpu.py tests/test_situ.py 2>&1 \
    | tee $OUT/gpu_tests.log | grep -E "passed|failed|FAILED|Error" | head -40
fi
timeout $bench_s python3 -m k3lite.bench --out $OUT/bench_h200.json --plot $OUT/bench_h200.png "$@" 2>&1 | tee $OUT/bench.log
