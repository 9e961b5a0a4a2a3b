# trtspec: `make demo` runs the main job on the embedded models; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# NVIDIA Dynamo's two wheels, without their placeholder dependency `aisimulate` (the real ones: extra `dynamo`).
DYNAMO_PACKAGES := ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1

.PHONY: install demo test lint bench aiperf clean

$(STAMP): pyproject.toml Makefile scripts/install_suffix.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,dynamo]'
	$(PY) -m pip install -q --no-deps $(DYNAMO_PACKAGES)
	bash scripts/install_suffix.sh $(PY)  # arctic-inference (method suffix), built against the torch just installed
	@touch $(STAMP)

install: $(STAMP)

demo: install
	bash scripts/demo.sh

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check trtspec tests scripts

# aiperf (NVIDIA's benchmark client) in its own environment: its pins (rich, pyzmq, ...) clash with trtspec's.
AIPERF_VENV := .venv-aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed-stamp
$(AIPERF_STAMP):
	@test -x $(AIPERF_VENV)/bin/python || python3 -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q aiperf==0.13.0
	@touch $(AIPERF_STAMP)

aiperf: $(AIPERF_STAMP)

bench: install aiperf
	$(PY) scripts/bench.py

clean:
	rm -rf $(VENV) $(AIPERF_VENV) .pytest_cache out
