"""The sections of `make bench` (scripts/bench.py): each a sweep spec, its run and its table (`benchmarks`; the
EAGLE section in `benchmarks_eagle`). Not part of the trtspec package: scripts/bench.py and
scripts/eagle_acceptance.py import it as `benchlib` (a script's own directory is on sys.path), the tests through
pytest's `pythonpath` (pyproject.toml)."""
