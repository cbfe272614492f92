#!/usr/bin/env bash
# One device call (carry=[".whl"], the flash-linear-attention wheels): the GPU tests of the kernels, then the
# whole benchmark. Logs and results under $OUT (gpu_info.txt, gpu_tests.log, bench.log, bench_h200.json/.png).
# Usage: bash scripts/gpu_final.sh [TEST_TIMEOUT_S] [BENCH_TIMEOUT_S]
set -o pipefail
test_s=${1:-170}; bench_s=${2:-360}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu_info.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> $OUT/gpu_info.txt
# The two halves of the test file in parallel processes: compiling dominates, and a fault in one leaves the other.
tests="python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_gpu.py"
timeout $test_s $tests -k chunked > /tmp/test_chunked.log 2>&1 &
timeout $test_s $tests -k "not chunked" > /tmp/test_other.log 2>&1 &
wait
for f in /tmp/test_chunked.log /tmp/test_other.log; do echo "$f: $(tail -1 $f)"; done | tee $OUT/test_summary.txt
cat /tmp/test_chunked.log /tmp/test_other.log > $OUT/gpu_tests.log
timeout $bench_s python3 -m k3lite.bench --out $OUT/bench_h200.json --plot $OUT/bench_h200.png 2>&1 | tee $OUT/bench.log
