#!/usr/bin/env bash
# The main job on the embedded default models (no network, no model download).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
trtspec doctor
trtspec models tiny
