#!/usr/bin/env bash
# One device call on two GPUs (device tool kind nvidia-h200-x2, carry=[".whl", ".t371"]: the
# flash-linear-attention 0.6.0 wheels and Triton 3.7.1 packed by scripts/pack_triton.sh). Every benchmark
# runs under Triton 3.7.1, the version fla needs for its gated backward on Hopper (issue #640); each row's
# ratio is measured within one process. GPU 0 benchmarks KDA and linear attention, with SiTU, decode and the
# per-kernel profile. GPU 1 runs the GPU tests (under 3.7.1, and Gated DeltaNet's under the device's own
# Triton too), then benchmarks Gated DeltaNet and DeltaNet. --merge joins the two files.
# Results under $OUT: tests.log, bench_gpu0/1.json and .log, bench_h200.json and .png.
# Usage: bash scripts/gpu_final.sh [BENCH0_TIMEOUT_S] [TEST_TIMEOUT_S] [BENCH1_TIMEOUT_S]
# Set-up on the machine that calls the device (once; both folders stay out of git through .git/info/exclude):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     flash-linear-attention==0.6.0 fla-core==0.6.0 && echo /.whl/ >> .git/info/exclude
#   bash scripts/pack_triton.sh
set -o pipefail
bench0_s=${1:-530}; test_s=${2:-175}; bench1_s=${3:-345}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/t371 /tmp/L && tar -xJf .t371/triton371.tar.xz -C /tmp/t371 || exit 1
export PYTHONUNBUFFERED=1
P_DEVICE=/tmp/site:$PWD; P_371=/tmp/t371:/tmp/site:$PWD
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv > /tmp/L/gpu_info.txt
PYTHONPATH=$P_DEVICE python3 -c "import torch, triton; print('device: torch', torch.__version__, 'triton', triton.__version__)" >> /tmp/L/gpu_info.txt
PYTHONPATH=$P_371 python3 -c "import triton; print('carried: triton', triton.__version__)" >> /tmp/L/gpu_info.txt
CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$P_371 timeout $bench0_s python3 -m k3lite.bench --out $OUT/bench_gpu0.json \
  --kinds kda,linear_attention > $OUT/bench_gpu0.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=1
  # The test file in parallel processes: compiling dominates, and a fault in one leaves the others.
  tests="python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_gpu.py"
  PYTHONPATH=$P_371 timeout $test_s $tests -k chunked > /tmp/L/test_chunked_371.log 2>&1 &
  PYTHONPATH=$P_371 timeout $test_s $tests -k "not chunked" > /tmp/L/test_other_371.log 2>&1 &
  PYTHONPATH=$P_DEVICE timeout $test_s $tests -k gated_delta_rule > /tmp/L/test_gdn_device.log 2>&1 &
  wait
  PYTHONPATH=$P_371 timeout $bench1_s python3 -m k3lite.bench --out $OUT/bench_gpu1.json \
    --kinds gated_delta_rule,delta_rule --sections fwd,fwd+bwd > $OUT/bench_gpu1.log 2>&1
) &
wait
for f in /tmp/L/*; do echo "== $f"; cat $f; done > $OUT/tests.log
for f in /tmp/L/test*; do echo "== $f"; tail -n 2 $f; done; cat /tmp/L/gpu_info.txt
PYTHONPATH=$P_371 python3 -m k3lite.bench --merge $OUT/bench_gpu0.json $OUT/bench_gpu1.json --out $OUT/bench_h200.json \
  --plot $OUT/bench_h200.png
grep -v Warn $OUT/bench_gpu0.log | tail -30; tail -14 $OUT/bench_gpu1.log
