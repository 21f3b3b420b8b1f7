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
# Phases whose labs are published: CI grades their reference solutions on the emulator.
GRADE_JOBS ?= 2
# make test runs the unit tests in this many processes (pytest-xdist; CI's machine has two cores): each test
# keeps its own workspace and emulator cache entries, so none depends on another running in the same process.
TEST_JOBS ?= 2
PHASES := phase1 phase2 phase3a phase3b phase4 phase5 phase6 phase7 phase8a phase8b
GPU_TOOLS := nbval==0.11.0 nbformat==5.10.4 nbclient==0.11.0 ipykernel==7.4.0 pytest-timeout==2.4.0 pytest==9.0.3

.PHONY: help venv test sandbox-tool check-book-layout test-fast lint book test-gpu gpu-tests benchmarks-gpu wheelhouse labs data clean gradescope

help:
	@echo "make book        build the course into _build/html (creates .venv, installs everything)"
	@echo "make test        the whole CPU test suite, as CI runs it (creates .venv, installs everything)"
	@echo "make test-gpu    GPU tests, solutions graded on cuda, benchmarks -> benchmarks/results/"
	@echo "make gpu-tests   the GPU tests only (GPU_TESTS=paths: a part of them)"
	@echo "make wheelhouse  wheels of the grading stack for an offline GPU machine"
	@echo "                 (WHEEL_PYTHON=$(WHEEL_PYTHON) WHEEL_PLATFORM=$(WHEEL_PLATFORM))"
	@echo "make labs        regenerate labs/ from solutions/"
	@echo "make gradescope PHASE=phase1  the Gradescope autograder zip of a phase (autograder-<phase>.zip)"
	@echo "make check-book-layout  the built book in headless Chromium: phone width, cut-off code, offline math"
	@echo "make data        write data/sales.tsv (synthetic sales, Phase 4) unless you have your own"

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	$(VPY) -m pip install --quiet --no-deps --no-build-isolation -e . || $(VPY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(STAMP)

lint: $(STAMP)
	$(VPY) -m ruff check .

# Everything CI checks. The emulator stands in for the GPU (one emulator worker a process: deterministic).
# make test grades the reference solutions GRADE_JOBS phases at a time: each grades in its own temporary
# workspace and records nothing, on one emulator worker, and its report prints whole when it ends
test: $(STAMP) sandbox-tool
	$(VPY) -m ruff check .
	$(VPY) -m grader labs --check
	MINITORCH_DEVICE=emu MINITORCH_EMU_WORKERS=1 $(VPY) -m pytest -m "not gpu" -q -n $(TEST_JOBS) --dist worksteal tests
	printf '%s\n' $(PHASES) | xargs -P $(GRADE_JOBS) -I{} sh -c 'out=$$(MINITORCH_DEVICE=emu $(VPY) -m grader check {} \
	  --solutions --device emu 2>&1); status=$$?; printf "%s\n" "$$out"; exit $$status'
	$(MAKE) --no-print-directory book

# grader grade-all runs each submission in a bubblewrap sandbox; its test needs bwrap. As root on
# Debian/Ubuntu (CI) it is installed when missing; elsewhere the sandbox tests are skipped.
sandbox-tool:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; }; } || \
	  echo "bwrap not installed: the grade-all sandbox tests will be skipped"

test-fast: $(STAMP)
	MINITORCH_DEVICE=emu MINITORCH_EMU_WORKERS=1 $(VPY) -m pytest -m "not gpu and not slow" -q -n $(TEST_JOBS) --dist worksteal tests

# Always from a clean _build: an incremental build can hide warnings.
book: $(STAMP)
	rm -rf _build
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@test -f _build/html/index.html
	@test -f _build/html/_static/mathjax/tex-chtml.js || (echo "MathJax is not served from the build (sphinx-mathjax-offline)" && exit 1)
	@! find _build/html -iname '*solution*' | grep -q . || (echo "a solution page was published" && exit 1)
	@echo "book: _build/html/index.html"

labs: $(STAMP)
	$(VPY) -m grader labs

# Instructors: the autograder zip of one phase for a Gradescope programming assignment (book/grading.md).
gradescope: $(STAMP)
	@test -n "$(PHASE)" || { echo "make gradescope PHASE=phase1 (the phase to grade)"; exit 2; }
	$(VPY) -m grader gradescope $(PHASE) --out autograder-$(PHASE).zip

# The built book in headless Chromium (apt-get install chromium): no page wider than a 400 px phone,
# no lab or appendix code block scrolling at 1280 px, every formula typeset with no network (MathJax
# from the build). Not part of `make test` (CI time).
check-book-layout: book
	$(VPY) book/check_layout.py _build/html

# sales.tsv for the Phase 4 deliverable: synthetic, deterministic (~1 s), written only when absent
# (a learner's own data/sales.tsv is never overwritten).
data: data/sales.tsv
data/sales.tsv: | $(STAMP)
	$(VPY) data/make_sales.py --out $@

# On a GPU machine: run with that machine's python3 (CuPy there), e.g.
#   pip install --no-index --find-links .wheelhouse --target /tmp/site $(GPU_TOOLS) && PYTHONPATH=/tmp/site make test-gpu
# Every phase is graded even when an earlier one fails (the exit status still reports the failure).
GPU_RUN := PYTHONPATH=$(CURDIR):$${PYTHONPATH:-} $(GPU_PYTHON)
GPU_BENCHMARKS ?= phase1_memory phase2_kernels phase3_xor phase4_reductions phase4_sales overhead phase5_gemm phase5_pool phase5_sales_optim phase6_conv phase6_mnist phase6_mnist_recipe phase7_gpt phase7_generate phase8a_hgemm phase8b_flash phase8b_memory
# GPU_TESTS: the test paths of the GPU suite (default: all of tests/, over ten minutes on an H100). On a machine
# that limits a command's time, `make gpu-tests GPU_TESTS=tests/grader`, then the rest, runs the suite in parts.
GPU_TESTS ?= tests
test-gpu: gpu-tests
	status=0; for phase in $(PHASES); do $(GPU_RUN) benchmarks/grade_solutions.py $$phase || status=1; done; exit $$status
	$(MAKE) --no-print-directory benchmarks-gpu

gpu-tests:
	@mkdir -p benchmarks/results
	MINITORCH_DEVICE=cuda $(GPU_RUN) -m pytest -m gpu -q -p no:cacheprovider $(GPU_TESTS)

benchmarks-gpu:
	@mkdir -p benchmarks/results
	for bench in $(GPU_BENCHMARKS); do $(GPU_RUN) benchmarks/$$bench.py; done

wheelhouse:
	rm -rf $(WHEELHOUSE) && mkdir -p $(WHEELHOUSE)
	$(PYTHON) -m pip download --quiet --only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp \
	  --platform $(WHEEL_PLATFORM) --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d $(WHEELHOUSE) $(GPU_TOOLS)
	@du -sh $(WHEELHOUSE)

clean:
	rm -rf _build .pytest_cache .ruff_cache
