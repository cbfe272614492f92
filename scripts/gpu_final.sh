#!/usr/bin/env bash
# One device call on two GPUs (device tool kind nvidia-h200-x2, carry=[".whl"]: the flash-linear-attention
# wheels). GPU 0 benchmarks KDA and linear attention, with SiTU, decode and the per-kernel profile; GPU 1 runs
# the GPU tests of the kernels, then benchmarks Gated DeltaNet and DeltaNet. Each row's ratio is measured
# within one process; --merge joins the two files. Results under $OUT: gpu_info.txt, test_*.log,
# bench_gpu0/1.json and .log, bench_h200.json and .png.
# Usage: bash scripts/gpu_final.sh [BENCH0_TIMEOUT_S] [TEST_TIMEOUT_S] [BENCH1_TIMEOUT_S]
set -o pipefail
bench0_s=${1:-480}; test_s=${2:-170}; bench1_s=${3:-290}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu_info.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> $OUT/gpu_info.txt
CUDA_VISIBLE_DEVICES=0 timeout $bench0_s python3 -m k3lite.bench --out $OUT/bench_gpu0.json \
  --kinds kda,linear_attention > $OUT/bench_gpu0.log 2>&1 &
(
  # The two halves of the test file in parallel processes: compiling dominates, and a fault in one leaves the other.
  tests="python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_gpu.py"
  CUDA_VISIBLE_DEVICES=1 timeout $test_s $tests -k chunked > $OUT/test_chunked.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout $test_s $tests -k "not chunked" > $OUT/test_other.log 2>&1 &
  wait
  CUDA_VISIBLE_DEVICES=1 timeout $bench1_s python3 -m k3lite.bench --out $OUT/bench_gpu1.json \
    --kinds gated_delta_rule,delta_rule --sections fwd,fwd+bwd > $OUT/bench_gpu1.log 2>&1
) &
wait
tail -n 2 $OUT/test_chunked.log $OUT/test_other.log
python3 -m k3lite.bench --merge $OUT/bench_gpu0.json $OUT/bench_gpu1.json --out $OUT/bench_h200.json --plot $OUT/bench_h200.png
grep -v Warn $OUT/bench_gpu0.log | tail -30; tail -14 $OUT/bench_gpu1.log
