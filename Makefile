# servetune: two commands do everything on a fresh machine.
#   make run    set up, then tune the embedded default (the proxy workload on what is here)
#   make test   set up, then lint, type-check and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: setup run test lint sglang-parser clean

# pip compiles what it installs on one core; compileall afterwards does it on every core and
# skips what is already compiled. A fresh venv with SGLang's parser (`make sglang-parser`, warm
# pip cache, 2-core box): 125 s with pip's compile, 86 s this way. Like pip, it leaves a file
# this Python cannot compile to the interpreter (torch ships Python-3.12-only test helpers),
# so its verdict is not the setup's.
PIP_QUIET    := -q --no-compile
COMPILE_SITE = $(BIN)/python -m compileall -q -j 0 \
	"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true

$(VENV)/.setup-done: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@# A machine without an NVIDIA driver gets the CPU build of torch, not GBs of CUDA wheels.
	if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install $(PIP_QUIET) torch; \
	else $(BIN)/pip install $(PIP_QUIET) torch==2.13.0; fi
	$(BIN)/pip install $(PIP_QUIET) -e '.[dev]'
	$(COMPILE_SITE)
	touch $@

setup: $(VENV)/.setup-done

# SGLang's own argument parser, for the contract tests (no GPU stack: --no-deps).
$(VENV)/.sglang-parser-done: $(VENV)/.setup-done requirements/sglang-parser.txt
	$(BIN)/pip install $(PIP_QUIET) -r requirements/sglang-parser.txt
	$(BIN)/pip install $(PIP_QUIET) --no-deps sglang==0.5.23
	$(COMPILE_SITE)
	touch $@

sglang-parser: $(VENV)/.sglang-parser-done

run: setup
	$(BIN)/servetune run $(ARGS)

LINT  = $(BIN)/ruff check .
TYPES = $(BIN)/mypy

lint: setup
	$(LINT)
	$(TYPES)

# Four workers on the 2-core box: the integration runs spend much of their time waiting (Ray's
# start, the stand-in's modelled time, a hung server's timeout), which two workers left idle.
# Idle, tests took 21.4 min with two and 16.0 min with four (a clean clone's `bash .ci/run`);
# beside two busy loops 33-37 min with two, 26 min with four. At four the box is CPU-bound.
# With the stand-in's lighter imports and mypy beside the tests (304443a): idle 13.8 min of
# tests, 15.6 min in all. On 3027e94, idle: 13.4 min of tests, 14.9 min in all at one hour,
# 16.2 and 18.1 min an hour before it (224a3a3 in the same hour: 13.1, 14.6): the host's
# speed moves by a third (one single-core loop: 2.2-3.9 s), and the suite is CPU-bound.
# The files that share one session's runs go to one worker, first; every other file to
# whichever worker is free, in tier order (tests/conftest.py, SHARED_GROUP).
# The suite starts ~1000 Python processes (drivers, Ray workers, stand-ins) that import the same
# project modules: they share compiled bytecode even where the environment says not to write it
# (PYTHONDONTWRITEBYTECODE=1 on CI's machine made each one compile ~170 modules anew).
# mypy (~40 s of one core on a clean clone) checks beside the tests instead of before them:
# ruff's verdict comes first, mypy's is printed after the tests', and either fails the target.
test: setup sglang-parser
	$(LINT)
	@types_out=$$(mktemp); trap 'rm -f "$$types_out"' EXIT; trap 'exit 130' INT TERM; \
	$(TYPES) > "$$types_out" 2>&1 & types=$$!; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 4; tests_rc=$$?; \
	wait $$types; types_rc=$$?; echo "mypy:"; cat "$$types_out"; \
	[ $$tests_rc -eq 0 ] && [ $$types_rc -eq 0 ]

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
