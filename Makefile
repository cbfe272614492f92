# nbval compares against outputs stored with the small profile, so tests always run with it.
# Stored outputs are made with ATen's and MKL's AVX2 code paths: without this pin, a CPU with AVX-512
# rounds some reductions differently and a trained model's printed losses drift in the last digit.
export ATEN_CPU_CAPABILITY ?= avx2
export MKL_ENABLE_INSTRUCTIONS ?= AVX2
# The two set-up commands of the README are `make book` and `make test`; both create .venv first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.k3lite-installed
# CPU wheel of PyTorch; installing it first keeps pip from pulling a multi-GB CUDA build.
TORCH   := torch==2.13.0
EXECUTE ?= 1
NOTEBOOKS = $$($(PY) scripts/bookinfo.py notebooks)

.PHONY: help install book test unit nbval lab timings execute slides bench clean

help:
	@echo "make book     install into .venv, execute every chapter, build the static site in _build/html"
	@echo "make test     install into .venv, run the k3lite tests and nbval over every chapter"
	@echo "make lab      JupyterLab on chapters/"
	@echo "make execute  re-execute chapters into their .ipynb (CH='01_gpt2 02_linear_attention' for some)"
	@echo "make timings  time every chapter against its book.yml budget"
	@echo "make slides   one reveal.js deck per chapter in _build/slides"
	@echo "make bench    the kernel benchmark table (python -m k3lite.bench)"

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[all]"
	touch $@

install: $(STAMP)

book: $(STAMP)
	$(PY) scripts/build_book.py --execute $(EXECUTE)

test: $(STAMP)
	K3LITE_PROFILE=small $(PY) -m pytest -q -p no:cacheprovider tests $(NOTEBOOKS) --nbval \
		--nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=900

unit: $(STAMP)
	$(PY) -m pytest -q tests

nbval: $(STAMP)
	K3LITE_PROFILE=small $(PY) -m pytest -q -p no:cacheprovider $(NOTEBOOKS) --nbval \
		--nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=900

lab: $(STAMP)
	$(VENV)/bin/jupyter lab chapters/

execute: $(STAMP)
	$(PY) scripts/execute.py $(CH)

timings: $(STAMP)
	$(PY) scripts/timings.py $(CH)

slides: $(STAMP)
	$(PY) scripts/build_slides.py

bench: $(STAMP)
	$(PY) -m k3lite.bench

clean:
	rm -rf _build .pytest_cache
