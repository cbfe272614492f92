#!/usr/bin/env bash
# One device call (carry=[".whl"]): the GPU tests of the kernels under each reverse state pass
# (K3LITE_BWD_STATE_PASS = native, native_s1, float32; kernels/chunk_bwd_triton.py), the first variant that
# passes every test is kept, then the whole benchmark runs with it. Logs and results under $OUT.
# Usage: bash scripts/gpu_final.sh [TEST_TIMEOUT_S] [BENCH_TIMEOUT_S]
set -o pipefail
test_s=${1:-170}; bench_s=${2:-360}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu_info.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> $OUT/gpu_info.txt
tests="python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_gpu.py"
for v in native native_s1 float32; do
  for part in chunked "not chunked"; do
    K3LITE_BWD_STATE_PASS=$v timeout $test_s $tests -k "$part" > "/tmp/test_${v}.${part// /_}.log" 2>&1 &
  done
done
wait
choice=float32
for v in float32 native_s1 native; do  # the last one that passes wins: native first, float32 the fallback
  ok=2  # both parts must end in a summary line with passes and no failure or error
  for f in /tmp/test_${v}.*.log; do tail -1 "$f" | grep " passed" | grep -qvE "failed|error" && ok=$((ok - 1)); done
  if [ $ok -eq 0 ]; then
    choice=$v
  fi
done
for f in /tmp/test_*.log; do echo "$f: $(tail -1 $f)"; done | tee $OUT/test_summary.txt
echo "reverse state pass kept: $choice" | tee -a $OUT/test_summary.txt
cat /tmp/test_*.log > $OUT/gpu_tests.log
export K3LITE_BWD_STATE_PASS=$choice
timeout $bench_s python3 -m k3lite.bench --out $OUT/bench_h200.json --plot $OUT/bench_h200.png 2>&1 | tee $OUT/bench.log
