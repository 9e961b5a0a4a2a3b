#!/usr/bin/env bash
# `make demo`: the main job on the embedded default models (no network, no model download).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. environment"
trtspec doctor

step "2. speculative decoding on the reference engine (tiny + tiny-draft, draft_target, k=4, greedy)"
trtspec generate --model tiny --draft tiny-draft --method draft_target --k 4 --max-new-tokens 64 "def fibonacci(n):"

step "3. TensorRT-LLM build: preflight, plan, checkpoint conversion (engine steps run where tensorrt_llm imports)"
trtspec build build_configs/tiny-draft-target.yaml --only convert --out out/build/tiny-trtllm

step "4. a small accept-rate sweep (resumable) and its report: tables, PNG plots, recommendation"
trtspec sweep --model tiny --draft tiny-draft --method draft_target,ngram --k 0,2,4 --temperature 0 --suite code \
    --concurrency 1 --num-prompts 2 --max-new-tokens 32 --threads 1 --out out/sweep/results.jsonl
trtspec report out/sweep/results.jsonl --out out/sweep/report

step "5. Triton: torch bundle -> model repository -> real tritonserver -> one gRPC request -> stop"
python scripts/demo_serve.py
