#!/usr/bin/env bash
# Pack Triton 3.7.1 (cp312, manylinux x86-64) small enough to travel to the device machine (64 MiB limit for
# the whole working tree): the reference library's gated backward refuses Triton < 3.7.1 on Hopper (fla
# issue #640), and the device image has 3.6.0. Drops what k3lite and fla never load (the Blackwell ptxas,
# CUPTI and profiler libraries, test helpers), strips libtriton.so of its symbol tables (461 MB -> 180 MB),
# and xz-compresses the rest: about 47 MiB. Writes .t371/triton371.tar.xz (git-ignored).
# On the device (as benchmarks/probes/gpu_final.sh does):
#   t371=$(mktemp -d) && tar -xJf .t371/triton371.tar.xz -C $t371 && export PYTHONPATH=$t371:$PYTHONPATH
set -euo pipefail
repo=$PWD   # the output goes here; the work folder is deleted at the end
work=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$work" triton==3.7.1
cd "$work" && mkdir slim && cd slim && unzip -q ../triton-3.7.1-*.whl
rm -rf triton/backends/nvidia/bin/ptxas-blackwell triton/backends/nvidia/bin/nvdisasm triton/FileCheck \
  triton/instrumentation/libGPUInstrumentationTestLib.so triton/backends/nvidia/lib/cupti/*.a \
  triton/backends/nvidia/lib/cupti/libnvperf_host.so triton/backends/nvidia/lib/cupti/libcupti.so.* \
  triton/backends/nvidia/lib/cupti/libcheckpoint.so triton/backends/nvidia/lib/cupti/libpcsamplingutil.so
strip --strip-unneeded triton/_C/libtriton.so triton/_C/libproton.so
cd "$repo"
mkdir -p .t371  # git-ignored (.gitignore)
tar -C "$work/slim" -cf - triton triton-3.7.1.dist-info | xz -9 -T0 > .t371/triton371.tar.xz
rm -rf "$work"; ls -l .t371/triton371.tar.xz
