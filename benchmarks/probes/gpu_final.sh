#!/usr/bin/env bash
# The GPU benchmark and GPU tests (device carry=[".whl", ".t371"]: the flash-linear-attention 0.6.0 wheels and
# Triton 3.7.1 packed by benchmarks/probes/pack_triton.sh). Every benchmark runs under Triton 3.7.1, the version fla
# needs for its gated backward on Hopper (issue #640). Each row is timed through the public ops API and
# through the kernels alone, with fla before and after, in one process. The work comes in parts:
#   kda     benchmark of KDA (fwd, fwd+bwd)
#   linear  benchmark of linear attention, SiTU, decode (ops.kda.step, in place, the kernel alone), the
#           per-kernel profile
#   gated   benchmark of Gated DeltaNet and DeltaNet
#   decode  model_decode: a K3-shaped model (KDA:MLA 3:1) against a GPT-2-shaped one with a KV cache,
#           tokens/s at 4k, 32k and 128k context (the seeds' "up to 6x decode")
#   probe   benchmarks/probes/gpu_decode_probe.py: where a decode step of each model spends its time
#   tests   the GPU tests, under 3.7.1 and under the device's own Triton (the gated kinds, the boundary,
#           layer and K3 tests, the head-width and in-place decode tests, the MoE's no-host-sync test)
# Parts are spread round-robin over the visible GPUs; on one GPU they run one after another, so split them
# over calls of at most 600 s. Measured on one H200 (2026-12-01, a fresh machine): the kda part needs about
# 280 s (fla autotunes its KDA forward and backward on first use: the first forward row comes at ~100 s, the
# first forward+backward row at ~250 s), so give it 330; the tests part runs four pytest processes at once,
# of which the chunked cases under 3.7.1 took 170 s and the others under 3.7.1 120 s. On 2026-12-02, after the
# tests part, the kda part finished in 224 s; with 225 s the tests part completed the chunked cases (188 s) and
# the MoE/width/in-place ones, but not the other two selections, which a second call on the warm machine ran in
# 35 and 49 s (compiled kernels cached). So, e.g.,
# `bash benchmarks/probes/gpu_final.sh 330 0 kda` + `bash benchmarks/probes/gpu_final.sh 300 0 gated`, then
# `bash benchmarks/probes/gpu_final.sh 250 240 linear,tests` and `... decode`. Later on 2026-12-02, on a fresh machine, the kda
# part with 287 s gave only its first row (at 123 s; the forward+backward row did not finish), the gated part
# reached its fifth row at 231 s, the decode part finished in 86 s, and the tests part with 260 s completed only
# the MoE/width/in-place/decode-cache selection (134 s): give kda 330 and tests 300 on a fresh machine.
# --merge joins the benchmark files of a call.
# Results under $OUT: tests.log, bench_<part>.json and .log, bench_h200.json and .png, tune.tar (fla's autotuning).
# Usage: bash benchmarks/probes/gpu_final.sh [BENCH_TIMEOUT_S] [TEST_TIMEOUT_S] [PARTS (comma-separated)]
# Set-up on the machine that calls the device (once; both folders stay out of git through .git/info/exclude):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     flash-linear-attention==0.6.0 fla-core==0.6.0 && echo /.whl/ >> .git/info/exclude
#   bash benchmarks/probes/pack_triton.sh
set -o pipefail
bench_s=${1:-540}; test_s=${2:-480}; parts=${3:-kda,linear,tests,gated,decode}
# One scratch folder on the device: the carried wheels and Triton installed, the logs, the Triton cache.
tmp=$(mktemp -d); site=$tmp/site; t371=$tmp/t371; logs=$tmp/logs
python3 -m pip install -q --no-index --no-deps --target $site .whl/*.whl || exit 1
mkdir -p $t371 $logs && tar -xJf .t371/triton371.tar.xz -C $t371 || exit 1
export PYTHONUNBUFFERED=1
# fla autotunes its kernels on first use, which took most of a call (above). fla asks Triton to keep each result
# on disk (cache_results, FLA_CACHE_RESULTS=1 by default): a <kernel>.autotune.json in the Triton cache, keyed by
# Triton, GPU target, kernel source and configs. Carry .tune/ (git-ignored) and the JSONs of an earlier call are put
# back, so fla compiles only its best configs; the call's JSONs come back as $OUT/tune.tar (copy it to .tune/).
# The first use (2026-12-02, kda part) wrote 17 such files, one folder each, and returned them loose: the device
# sends back only so many files, and 16 were left out. Hence one tar; that form has not yet run on the device.
export TRITON_CACHE_DIR=$tmp/triton_cache
mkdir -p $TRITON_CACHE_DIR && [ -f .tune/tune.tar ] && tar -xf .tune/tune.tar -C $TRITON_CACHE_DIR
P_DEVICE=$site:$PWD; P_371=$t371:$site:$PWD
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv > $logs/gpu_info.txt
PYTHONPATH=$P_DEVICE python3 -c "import torch, triton; print('device: torch', torch.__version__, 'triton', triton.__version__)" >> $logs/gpu_info.txt
PYTHONPATH=$P_371 python3 -c "import triton; print('carried: triton', triton.__version__)" >> $logs/gpu_info.txt
bench() {  # GPU, name, options...
  local gpu=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=$P_371 timeout $bench_s python3 -m benchmarks.bench --out $OUT/$name.json "$@" \
    > $OUT/$name.log 2>&1
}
gpu_tests() {  # GPU
  export CUDA_VISIBLE_DEVICES=$1
  # The test file in parallel processes: compiling dominates, and a fault in one leaves the others.
  tests="python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_gpu.py"
  PYTHONPATH=$P_371 timeout $test_s $tests -k chunked > $logs/test_chunked_371.log 2>&1 &
  PYTHONPATH=$P_371 timeout $test_s $tests -k "not chunked" > $logs/test_other_371.log 2>&1 &
  PYTHONPATH=$P_DEVICE timeout $test_s $tests -k "gated_delta_rule or spike or mixed or layer or k3 or synchron or bad_gate or bad_value" \
    > $logs/test_device.log 2>&1 &
  PYTHONPATH=$P_DEVICE timeout $test_s python3 -m pytest -q -p no:cacheprovider -rf tests/test_moe_gpu.py \
    tests/test_kernels_gpu_widths.py tests/test_decode_in_place.py tests/test_decode_caches_gpu.py > $logs/test_more_device.log 2>&1 &
  wait
}
run_part() {  # GPU, part
  case $2 in
    kda) bench $1 bench_kda --kinds kda --sections fwd,fwd+bwd ;;
    linear) bench $1 bench_linear --kinds linear_attention --sections situ,decode,profile,fwd,fwd+bwd ;;
    gated) bench $1 bench_gated --kinds gated_delta_rule,delta_rule --sections fwd,fwd+bwd ;;
    decode) bench $1 bench_model_decode --kinds kda --sections model_decode ;;
    probe) CUDA_VISIBLE_DEVICES=$1 PYTHONPATH=$P_371 timeout $bench_s python3 benchmarks/probes/gpu_decode_probe.py \
             > $OUT/decode_probe.log 2>&1 ;;
    tests) gpu_tests $1 ;;
    *) echo "unknown part $2 (kda, linear, gated, decode, probe, tests)"; return 2 ;;
  esac
}
# Parts go round-robin over the visible GPUs; the parts of one GPU run one after another, so no two
# measurements ever share a GPU.
IFS=, read -r -a part_list <<< "$parts"
gpus=$(nvidia-smi -L | wc -l)
for ((g = 0; g < gpus && g < ${#part_list[@]}; g++)); do
  (for ((i = g; i < ${#part_list[@]}; i += gpus)); do run_part $g "${part_list[$i]}"; done) &
done
wait
(cd $TRITON_CACHE_DIR && find . -name '*.autotune.json' | tar -cf $OUT/tune.tar -T -)
for f in $logs/*; do echo "== $f"; cat $f; done > $OUT/tests.log
for f in $logs/test*; do [ -f "$f" ] && { echo "== $f"; tail -n 2 $f; }; done; cat $logs/gpu_info.txt
jsons=$(ls $OUT/bench_*.json 2>/dev/null | grep -v bench_h200)
[ -n "$jsons" ] && PYTHONPATH=$P_371 python3 -m benchmarks.bench --merge $jsons --out $OUT/bench_h200.json --plot $OUT/bench_h200.png
for f in $OUT/bench_*.log; do echo "== $f"; grep -v Warn $f | tail -16; done
if [ -f $OUT/decode_probe.log ]; then echo "== $OUT/decode_probe.log"; grep -v Warn $OUT/decode_probe.log | tail -60; fi
