# trtspec: `make demo` runs the main job on the embedded models; `make test` runs the tests, `make check` the unit tests.
# What each command takes on the 2-core machine: README.md, section Set-up (stated there only).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# pytest with bytecode kept (an environment may set PYTHONDONTWRITEBYTECODE): pytest caches its assertion-rewritten
# test modules in __pycache__ only then, and rewriting all of them costs each process ~7 CPU-s, every run.
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
# `make test` runs the suite in this many pytest-xdist processes, one test module per process at a time (a module's
# server and bundle are set up once). 3 on the 2-core CI machine: one more process than cores, so a module waiting on a
# server, a signal or a clock leaves no core idle (side by side in the same hour 3 took ~13% less time than 2, and 4
# was no faster than 3). PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3
# NVIDIA Dynamo's two wheels, without their placeholder dependency `aisimulate` (the real ones: extra `dynamo`).
DYNAMO_PACKAGES := ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1

.PHONY: install demo test check readme lint bench aiperf assets assets-models assets-prompts assets-docs clean

$(STAMP): pyproject.toml Makefile scripts/install_suffix.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,dynamo,onnx]'
	$(PY) -m pip install -q --no-deps $(DYNAMO_PACKAGES)
	bash scripts/install_suffix.sh $(PY)  # arctic-inference (method suffix), built against the torch just installed
	@touch $(STAMP)

install: $(STAMP)

demo: install
	bash scripts/demo.sh

# The README's quick tour as a test (tests/test_readme_*.py: every command in order, servers on the README's ports) runs
# as its own step of .ci/run (`make readme`): ~190 CPU-s of fixed start-up costs (trainers, tritonservers, Dynamo, the
# two demos) that would take `make test` past its 5-minute budget on the 2-core machine.
README_TESTS := tests/test_readme_commands.py tests/test_readme_demos.py

test: install
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadfile $(addprefix --ignore=,$(README_TESTS)) $(PYTEST_ARGS)

# The unit tests, for the edit loop (budget: one minute on the 2-core machine): `make test` less the tests marked
# `process` (trtspec in a child process: servers, CLI processes, forked builds and sweeps; `triton` and `dynamo` imply
# it) or `slow` (seconds in-process). tests/tiers.py says how a test is marked; its guard fails a test that starts
# trtspec in a child unmarked, in every run.
CHECK_MARKERS := not process and not slow

check: install
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadfile $(addprefix --ignore=,$(README_TESTS)) \
	    -m "$(CHECK_MARKERS)" $(PYTEST_ARGS)

readme: install
	$(PYTEST) -q -n 2 --dist loadfile $(README_TESTS) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check trtspec tests scripts
	$(VENV)/bin/lint-imports  # the layers (pyproject.toml [tool.importlinter]; docs/architecture.md)

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

# `make assets` regenerates every shipped asset from its recipe, in dependency order (hours on 2 CPU cores; `make -n
# assets` lists the commands): the embedded models and prompt suites in trtspec/assets/, then the recorded runs in
# docs/ that use them (the sweep reports and the operations figures). Afterwards rerun `make bench`: the numbers in
# docs/ and the tests that read docs/sweep/results.jsonl move with the models.
ASSET_MODELS := trtspec/assets/models
EAGLE_RECIPE := --draft-vocab-size 2048 --steps 400 --batch-size 12 --prompts 256 --gen-len 224 --corpus-windows 256

assets: assets-models assets-prompts assets-docs

assets-models: install
	$(PY) scripts/train_tiny_models.py  # tiny + tiny-draft and the code/prose/grounded suites (~20 min)
	$(PY) scripts/add_chat_template.py  # idempotent: the trained tokenizers already carry the chat template
	$(PY) scripts/train_tiny_medusa.py  # tiny-medusa: heads, tuned tree, acceptance card (~10-15 min)
	$(PY) -m trtspec train eagle --model tiny $(EAGLE_RECIPE) --out $(ASSET_MODELS)/tiny-eagle  # (~30 min)
	$(PY) scripts/eagle_acceptance.py --prompts 6 --new-tokens 64 --ks 4 8 16  # tiny-eagle's acceptance card

assets-prompts: install
	$(PY) scripts/make_repetitive_suite.py  # trtspec/assets/prompts/repetitive.jsonl

# A sweep resumes an existing results file, so each starts from an empty one. The k = 8 loop (docs/operations/k8)
# reuses the shifted-suite sweep of the loop before it (the recorded run pooled three earlier sweeps).
assets-docs: install
	rm -f docs/sweep/results.jsonl docs/sweep-suffix/results.jsonl
	$(PY) -m trtspec sweep --model tiny --draft tiny-draft --method draft_target,ngram --k 0-8 --temperature 0,1 \
	    --suite code,grounded --concurrency 1,4 --num-prompts 4 --max-new-tokens 64 --threads 1 \
	    --out docs/sweep/results.jsonl
	$(PY) -m trtspec report docs/sweep/results.jsonl --out docs/sweep --price-per-hour 2.5
	$(PY) -m trtspec sweep --model tiny --method ngram,suffix --k 0,8 --temperature 0,1 \
	    --suite code,prose,repetitive --concurrency 1 --num-prompts 8 --max-new-tokens 48 --threads 1 \
	    --calibration-batch-sizes 1 --out docs/sweep-suffix/results.jsonl
	$(PY) -m trtspec report docs/sweep-suffix/results.jsonl --out docs/sweep-suffix --no-plots --gpu H100
	$(PY) scripts/drift_demo.py --docs  # docs/operations/{acceptance.png,dashboard-*.txt}
	$(PY) scripts/ops_loop.py --verbose --docs  # docs/operations/loop-* (~10 min)
	$(PY) scripts/ops_loop.py --verbose --k 8 --work out/ops-loop-k8 --out docs/operations/k8 --no-retrain \
	    --sweep-results out/ops-loop/shifted-sweep.jsonl

clean:
	rm -rf $(VENV) $(AIPERF_VENV) .pytest_cache out
