"""Demo, last step of `make demo`: deploy the embedded pair to Triton, serve it, answer one gRPC request, stop.

    python scripts/demo_serve.py [--build out/build/tiny-torch] [--repo out/triton/tiny-torch] [--prompt TEXT]

1. the torch bundle of the embedded pair (`trtspec build build_configs/tiny-torch.yaml` when --build has none),
2. `trtspec deploy --backend torch` (rendered in-process, every config.pbtxt parsed as Triton's ModelConfig),
3. a real tritonserver on free 127.0.0.1 ports (nvidia-pytriton's binary on CPU),
4. one streamed gRPC request through the `ensemble` (text in, text out) with the acceptance counters,
5. the server is stopped; the exit code is 0 only when the answer came back.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "build_configs" / "tiny-torch.yaml")
    parser.add_argument("--build", type=Path, default=ROOT / "out" / "build" / "tiny-torch")
    parser.add_argument("--repo", type=Path, default=ROOT / "out" / "triton" / "tiny-torch")
    parser.add_argument("--prompt", default="def fibonacci(n):")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args(argv)

    from trtspec.triton.client import Completion, TritonClient
    from trtspec.triton.render import write_repository
    from trtspec.triton.repo import RepoSpec, plan_repository
    from trtspec.triton.server import TritonServer

    if not (args.build / "trtspec-manifest.json").is_file():
        print(f"[demo] building the torch bundle: trtspec build {args.config} --out {args.build}")
        subprocess.run([sys.executable, "-m", "trtspec", "build", str(args.config), "--out", str(args.build)],
                       check=True)
    spec = RepoSpec.from_build(args.build, "torch", decoupled=True)  # the demo streams: decoupled_mode on
    repo = write_repository(plan_repository(spec), args.repo, force=True)
    print(f"[demo] model repository: {repo} (method {spec.method}, k {spec.engine.default_k})")
    start = time.perf_counter()
    with TritonServer(repo) as server:
        print(f"[demo] tritonserver ready in {time.perf_counter() - start:.1f} s: gRPC {server.grpc_url}, "
              f"metrics {server.metrics_url}")
        print(f"[demo] prompt: {args.prompt!r}\n")
        chunks = []
        with TritonClient(server.grpc_url, model="ensemble") as client:
            for chunk in client.stream(args.prompt, max_tokens=args.max_tokens):  # k: the repository's default
                print(chunk.text, end="", flush=True)
                chunks.append(chunk)
        out = Completion.from_chunks(chunks)
        print(f"\n\n[demo] {len(out.text)} characters in {len(chunks)} streamed responses over gRPC")
        if out.acceptance_rate is not None:  # the ensemble passes the counters only where its outputs declare them
            print(f"[demo] acceptance rate {out.acceptance_rate:.2f} ({out.total_accepted_draft_tokens}/"
                  f"{out.total_draft_tokens} draft tokens accepted)")
        with urllib.request.urlopen(server.metrics_url, timeout=10) as page:  # the served model's acceptance series
            series = [line for line in page.read().decode().splitlines()
                      if line.startswith("trtspec_") and 'model="tensorrt_llm"' in line and "_bucket" not in line]
        print("[demo] acceptance series on the metrics port:\n  " + "\n  ".join(series[:8]))
    print("[demo] tritonserver stopped")
    return 0 if out.text else 1


if __name__ == "__main__":
    sys.exit(main())
