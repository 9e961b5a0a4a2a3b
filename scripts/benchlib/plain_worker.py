"""The `headline` section's baseline worker: the engine's plain decoding of another checkout (a git revision unpacked
by benchmarks_headline.py), run in its own process so that both versions of trtspec can be timed side by side.

Protocol (JSON lines): argv = model, threads; then per request one line on stdin {"prompt": [ids], "new_tokens": n}
and one line on stdout {"tokens": [ids], "wall_s": s, "cpu_s": s}. The first stdout line is {"trtspec": path} (the
package actually imported, so the caller can check it is the unpacked one). Imports only trtspec's engine API that
every revision since the engine's start has (SpecEngine.from_pretrained, generate, SamplingParams, SpecParams).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import torch

    import trtspec
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    model, threads = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(threads)
    engine = SpecEngine.from_pretrained(model)
    plain = SpecParams(method="none", k=0)
    print(json.dumps({"trtspec": trtspec.__file__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=request["new_tokens"], ignore_eos=True)
        start, cpu = time.perf_counter(), time.process_time()
        out = engine.generate([request["prompt"]], sampling, plain)[0]
        wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        print(json.dumps({"tokens": out.token_ids, "wall_s": wall_s, "cpu_s": cpu_s}), flush=True)


if __name__ == "__main__":
    main()
