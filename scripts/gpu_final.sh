#!/usr/bin/env bash
# One device call on four GPUs (device tool kind nvidia-h200-x4, carry=[".whl", ".t371"]: the
# flash-linear-attention 0.6.0 wheels and Triton 3.7.1 packed by scripts/pack_triton.sh). Every benchmark
# runs under Triton 3.7.1, the version fla needs for its gated backward on Hopper (issue #640). Each row is
# timed through the public ops API and through the kernels alone, with fla before and after, in one process.
#   GPU 0: benchmark of KDA (fwd, fwd+bwd)
#   GPU 1: benchmark of linear attention, then SiTU, decode (ops.kda.step, in place, the kernel alone),
#          the per-kernel profile, and last model_decode: a K3-shaped model (KDA:MLA 3:1) against a
#          GPT-2-shaped one with a KV cache, tokens/s at 4k, 32k and 128k context (the "up to 6x decode")
#   GPU 2: the GPU tests (under 3.7.1, and the gated kinds' and the new boundary / layer / K3 tests under
#          the device's own Triton too; tests/test_moe_gpu.py: the MoE never synchronises the host)
#   GPU 3: benchmark of Gated DeltaNet and DeltaNet
# --merge joins the three benchmark files. Results under $OUT: tests.log, bench_gpu{0,1,3}.json and .log,
# bench_h200.json and .png.
# Usage: bash scripts/gpu_final.sh [BENCH_TIMEOUT_S] [TEST_TIMEOUT_S]
# Only model_decode, on a single GPU (kind nvidia-h200; needs neither fla nor Triton 3.7.1; not yet run on a GPU):
#   PYTHONPATH=$PWD python3 -m k3lite.bench --sections model_decode --out $OUT/model_decode.json \
#     > $OUT/model_decode.log 2>&1; grep -v Warn $OUT/model_decode.log | tail -8
# Set-up on the machine that calls the device (once; both folders stay out of git through .git/info/exclude):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     flash-linear-attention==0.6.0 fla-core==0.6.0 && echo /.whl/ >> .git/info/exclude
#   bash scripts/pack_triton.sh
set -o pipefail
bench_s=${1:-540}; test_s=${2:-480}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/t371 /tmp/L && tar -xJf .t371/triton371.tar.xz -C /tmp/t371 || exit 1
export PYTHONUNBUFFERED=1
P_DEVICE=/tmp/site:$PWD; P_371=/tmp/t371:/tmp/site:$PWD
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv > /tmp/L/gpu_info.txt
PYTHONPATH=$P_DEVICE python3 -c "import torch, triton; print('device: torch', torch.__version__, 'triton', triton.__version__)" >> /tmp/L/gpu_info.txt
PYTHONPATH=$P_371 python3 -c "import triton; print('carried: triton', triton.__version__)" >> /tmp/L/gpu_info.txt
bench() {  # GPU, name, options...
  local gpu=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=$P_371 timeout $bench_s python3 -m k3lite.bench --out $OUT/$name.json "$@" \
    > $OUT/$name.log 2>&1
}
bench 0 bench_gpu0 --kinds kda --sections fwd,fwd+bwd &
bench 1 bench_gpu1 --kinds linear_attention --sections situ,decode,profile,fwd,fwd+bwd,model_decode &
bench 3 bench_gpu3 --kinds gated_delta_rule,delta_rule --sections fwd,fwd+bwd &
(
  export CUDA_VISIBLE_DEVICES=2
  # The test file in parallel processes: compiling dominates, and a fault in one leaves the others.
  tests="python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_gpu.py"
  PYTHONPATH=$P_371 timeout $test_s $tests -k chunked > /tmp/L/test_chunked_371.log 2>&1 &
  PYTHONPATH=$P_371 timeout $test_s $tests -k "not chunked" > /tmp/L/test_other_371.log 2>&1 &
  PYTHONPATH=$P_DEVICE timeout $test_s $tests -k "gated_delta_rule or spike or mixed or layer or k3 or synchron or bad_gate" \
    > /tmp/L/test_device.log 2>&1 &
  PYTHONPATH=$P_DEVICE timeout $test_s python3 -m pytest -q -p no:cacheprovider -rf tests/test_moe_gpu.py \
    > /tmp/L/test_moe_device.log 2>&1 &
  wait
) &
wait
for f in /tmp/L/*; do echo "== $f"; cat $f; done > $OUT/tests.log
for f in /tmp/L/test*; do echo "== $f"; tail -n 2 $f; done; cat /tmp/L/gpu_info.txt
PYTHONPATH=$P_371 python3 -m k3lite.bench --merge $OUT/bench_gpu0.json $OUT/bench_gpu1.json $OUT/bench_gpu3.json \
  --out $OUT/bench_h200.json --plot $OUT/bench_h200.png
for f in $OUT/bench_gpu*.log; do echo "== $f"; grep -v Warn $f | tail -16; done
