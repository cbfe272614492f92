"""pytest hooks shared by the unit tests and nbval."""

import os

# The stored notebook outputs were made on ATen's and MKL's AVX2 code paths (see the Makefile); the
# kernels nbval starts inherit this environment, so a CPU with AVX-512 reproduces them too.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", "AVX2")


def pytest_collectstart(collector):
    # Warnings printed by libraries (stderr) differ between versions; the lesson's content is stdout.
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
