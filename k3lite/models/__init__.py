"""Whole models built from the library's layers: GPT-2, Kimi K3, the small mixer LM, and sampling."""
