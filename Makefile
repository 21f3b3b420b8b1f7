# MiniTorch CUDA: every set-up step lives here, so a fresh clone needs only `make book` or `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Datasets: tests and CI read them from ../shared/data when it exists (never downloaded there).
export MINITORCH_DATA_DIR ?= $(abspath $(wildcard ../shared/data))

# GPU machine (no internet): its own python3 with CuPy, plus a wheelhouse of the Jupyter stack.
GPU_PYTHON ?= python3
WHEELHOUSE ?= .wheelhouse
WHEEL_PYTHON ?= 3.12
WHEEL_PLATFORM ?= manylinux_2_28_x86_64
GPU_TOOLS := nbval==0.11.0 nbformat==5.10.4 nbclient==0.11.0 ipykernel==7.4.0 pytest-timeout==2.4.0 pytest==9.0.3

.PHONY: help venv test test-fast lint book test-gpu wheelhouse labs clean

help:
	@echo "make book        build the course into _build/html (creates .venv, installs everything)"
	@echo "make test        the whole CPU test suite, as CI runs it (creates .venv, installs everything)"
	@echo "make test-gpu    GPU tests, solutions graded on cuda, benchmarks -> benchmarks/results/"
	@echo "make wheelhouse  wheels of the grading stack for an offline GPU machine"
	@echo "                 (WHEEL_PYTHON=$(WHEEL_PYTHON) WHEEL_PLATFORM=$(WHEEL_PLATFORM))"
	@echo "make labs        regenerate labs/ from solutions/"

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	$(VPY) -m pip install --quiet --no-deps --no-build-isolation -e . || $(VPY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(STAMP)

lint: $(STAMP)
	$(VPY) -m ruff check .

# Everything CI checks. The emulator stands in for the GPU (one worker: deterministic).
test: $(STAMP)
	$(VPY) -m ruff check .
	$(VPY) -m grader labs --check
	MINITORCH_DEVICE=emu MINITORCH_EMU_WORKERS=1 $(VPY) -m pytest -m "not gpu" -q tests
	MINITORCH_DEVICE=emu $(VPY) -m grader check phase1 --solutions --device emu
	$(MAKE) --no-print-directory book

test-fast: $(STAMP)
	MINITORCH_DEVICE=emu $(VPY) -m pytest -m "not gpu and not slow" -q tests

# Always from a clean _build: an incremental build can hide warnings.
book: $(STAMP)
	rm -rf _build
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@test -f _build/html/index.html
	@! find _build/html -iname '*solution*' | grep -q . || (echo "a solution page was published" && exit 1)
	@echo "book: _build/html/index.html"

labs: $(STAMP)
	$(VPY) -m grader labs

# On a GPU machine: run with that machine's python3 (CuPy there), e.g.
#   pip install --no-index --find-links .wheelhouse --target /tmp/site $(GPU_TOOLS) && PYTHONPATH=/tmp/site make test-gpu
test-gpu:
	@mkdir -p benchmarks/results
	PYTHONPATH=$(CURDIR):$${PYTHONPATH:-} MINITORCH_DEVICE=cuda $(GPU_PYTHON) -m pytest -m gpu -q -p no:cacheprovider tests
	PYTHONPATH=$(CURDIR):$${PYTHONPATH:-} $(GPU_PYTHON) benchmarks/grade_solutions.py phase1
	PYTHONPATH=$(CURDIR):$${PYTHONPATH:-} $(GPU_PYTHON) benchmarks/phase1_memory.py

wheelhouse:
	rm -rf $(WHEELHOUSE) && mkdir -p $(WHEELHOUSE)
	$(PYTHON) -m pip download --quiet --only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp \
	  --platform $(WHEEL_PLATFORM) --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d $(WHEELHOUSE) $(GPU_TOOLS)
	@du -sh $(WHEELHOUSE)

clean:
	rm -rf _build .pytest_cache .ruff_cache
