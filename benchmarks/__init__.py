"""Kernel benchmarks, kept beside the package as the reference library keeps its own."""
