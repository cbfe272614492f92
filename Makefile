# nbval compares against outputs stored with the small profile, so tests always run with it.
# No CPU code path is pinned: every compared output is the same on any CPU (see CONTRIBUTING.md).
# The two set-up commands of the README are `make book` and `make test`; both create .venv first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.k3lite-installed
TORCH   := torch==2.13.0
# TORCH_BUILD=cpu (default) installs PyTorch from its CPU-only wheel index (about 200 MB); if that index
# cannot be reached, pip falls back to the plain index. TORCH_BUILD=default takes the plain index at once
# (on Linux that is the CUDA build, several GB: choose it on a machine with an NVIDIA GPU).
TORCH_BUILD     ?= cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# JupyterLab refuses to start as root (Docker, CI) unless told that this is intended.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
LAB_DIR  ?= chapters
LAB_ARGS ?=
EXECUTE ?= 1
NOTEBOOKS = $$($(PY) scripts/bookinfo.py notebooks)

.PHONY: help install book test unit nbval lab timings execute slides student bench clean

help:
	@echo "make book     install into .venv, execute every chapter, build the static site in _build/html"
	@echo "make test     install into .venv, run the k3lite tests and nbval over every chapter"
	@echo "make lab      JupyterLab on chapters/ (works as root too)"
	@echo "make serve    serve the built site on http://localhost:8000 (search works there)"
	@echo "make execute  re-execute chapters into their .ipynb (CH='01_gpt2 02_linear_attention' for some)"
	@echo "make timings  time every chapter against its book.yml budget"
	@echo "make slides   one reveal.js deck per chapter in _build/slides"
	@echo "make student  the student edition in _build/student: solutions emptied (instructors: chapters/)"
	@echo "make bench    the kernel benchmark table (python -m benchmarks.bench)"

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ "$(TORCH_BUILD)" = cpu ]; then \
	  $(PY) -m pip install -q --retries 1 --index-url $(TORCH_CPU_INDEX) $(TORCH) || $(PY) -m pip install -q $(TORCH); \
	else \
	  $(PY) -m pip install -q $(TORCH); \
	fi
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

# The server's root is chapters/, where jupytext.toml pairs each .py with its .ipynb: opening either
# shows the notebook with its outputs, and a save updates both. The .py twins are hidden from the file
# browser so each chapter is listed once.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=$(LAB_DIR) $(LAB_ROOT_FLAG) \
		'--ContentsManager.hide_globs=["__pycache__","*.pyc","*.py","jupytext.toml",".ipynb_checkpoints"]' $(LAB_ARGS)

execute: $(STAMP)
	$(PY) scripts/execute.py $(CH)

timings: $(STAMP)
	$(PY) scripts/timings.py $(CH)

slides: $(STAMP)
	$(PY) scripts/build_slides.py

# The student edition: each chapter's .ipynb and .py with every exercise solution replaced by a
# placeholder and its output removed (scripts/make_student.py); the instructor edition is chapters/.
student: $(STAMP)
	$(PY) scripts/make_student.py

# The built site over http://localhost (search needs it: over file:// the browser refuses the index's
# snippets). PORT=8000 by default; the slides are under /slides/.
PORT ?= 8000
.PHONY: serve
serve:
	@test -f _build/html/index.html || { echo "no site in _build/html: run make book first"; exit 1; }
	@echo "serving _build/html on http://localhost:$(PORT)/ (Ctrl-C stops it)"
	python3 -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

bench: $(STAMP)
	$(PY) -m benchmarks.bench

clean:
	rm -rf _build .pytest_cache
