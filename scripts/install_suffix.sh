#!/usr/bin/env bash
# Install arctic-inference (method suffix: Snowflake's SuffixDecodingCache) into the environment of PYTHON.
#
# PyPI has no wheel of any arctic-inference release that has suffix decoding (0.0.6 .. 0.3.0 are source only), so
# pip compiles its C++20 extension. Its build-system requires "torch>=2.10.0" (setup.py imports torch, although the
# suffix extension does not use it), so an isolated build downloads a second, newer torch (a CUDA one on Linux) just
# to build; this script builds against the environment's own torch instead (`--no-build-isolation`) and installs
# only what the build uses: setuptools, wheel, nanobind 2.9.2 (the version arctic-inference pins), ninja, and cmake
# when the machine has none >= 3.18. grpcio-tools is left out on purpose: arctic-inference's build only uses it to
# generate the gRPC stubs of its embedding server (it prints "Failed to generate gRPC code" and goes on), and it
# would move protobuf under tritonclient. arctic-inference itself declares no run-time dependencies.
#
# Usage: scripts/install_suffix.sh [PYTHON]      (default: python3; `make install` passes the venv's python)
# Exit codes: 0 installed (or already there), 3 no C++ compiler, other = pip's.
set -euo pipefail
PY=${1:-python3}
VERSION=0.3.0  # keep in step with pyproject.toml's `suffix` extra and trtspec/spec/proposers/suffix.py

if "$PY" - "$VERSION" <<'EOF' 2>/dev/null; then exit 0; fi
import sys
from importlib.metadata import version

import arctic_inference.suffix_decoding  # noqa: F401  (the compiled extension loads)

sys.exit(version("arctic-inference") != sys.argv[1])
EOF

cxx=${CXX:-c++}
if ! command -v "$cxx" >/dev/null; then
    echo "Error: arctic-inference==$VERSION compiles a C++20 extension, and no C++ compiler ($cxx) is on PATH" >&2
    echo "Hint: install one (Debian/Ubuntu: apt-get install g++), then rerun; every method but suffix works without it" >&2
    exit 3
fi

deps=("setuptools>=70.1" wheel "nanobind==2.9.2" ninja)
have_cmake() {  # cmake >= 3.18 on PATH (arctic-inference's CMakeLists minimum)
    local v
    v=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p') || return 1
    [ -n "$v" ] && set -- $v && { [ "$1" -gt 3 ] || { [ "$1" -eq 3 ] && [ "$2" -ge 18 ]; }; }
}
have_cmake || deps+=("cmake>=3.18")

bin=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")
"$PY" -m pip install -q "${deps[@]}"
# the venv's bin first: the build runs `cmake` (maybe pip's) and `python -m nanobind` from PATH
PATH="$bin:$PATH" "$PY" -m pip install -q --no-build-isolation "arctic-inference==$VERSION"
"$PY" -c 'import arctic_inference.suffix_decoding'
