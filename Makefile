# trtspec: `make demo` runs the main job on the embedded models; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# NVIDIA Dynamo's two wheels, without their placeholder dependency `aisimulate` (the real ones: extra `dynamo`).
DYNAMO_PACKAGES := ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,dynamo]'
	$(PY) -m pip install -q --no-deps $(DYNAMO_PACKAGES)
	@touch $(STAMP)

install: $(STAMP)

demo: install
	bash scripts/demo.sh

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check trtspec tests scripts

bench: install
	$(PY) scripts/bench.py

clean:
	rm -rf $(VENV) .pytest_cache out
