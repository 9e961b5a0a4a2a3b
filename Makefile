# trtspec: `make demo` runs the main job on the embedded models; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml scripts/install_suffix.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	bash scripts/install_suffix.sh $(PY)  # arctic-inference (method suffix), built against the torch just installed
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
