"""The `headline` section's baseline worker: the engine of another checkout (a git revision unpacked by
benchmarks_headline.py), run in its own process so that both versions of trtspec can be timed side by side.

Protocol (JSON lines): argv = model, draft, threads; then per request one line on stdin {"prompt": [ids],
"new_tokens": n, "method": name, "k": k} and one line on stdout {"tokens": [ids], "wall_s": s, "cpu_s": s, "drafts": n, "accepted": n}. The first stdout line is {"trtspec": path} (the
package actually imported, so the caller can check it is the unpacked one). Imports only trtspec's engine API that
every revision since the engine's start has (SpecEngine.from_pretrained, generate, SamplingParams, SpecParams).
Greedy, EOS ignored.
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

    model, draft, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(threads)
    engine = SpecEngine.from_pretrained(model, draft=draft)
    print(json.dumps({"trtspec": trtspec.__file__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=request["new_tokens"], ignore_eos=True)
        start, cpu = time.perf_counter(), time.thread_time()
        out = engine.generate([request["prompt"]], sampling, SpecParams(method=request["method"], k=request["k"]))[0]
        wall_s, cpu_s = time.perf_counter() - start, time.thread_time() - cpu
        print(json.dumps({"tokens": out.token_ids, "wall_s": wall_s, "cpu_s": cpu_s, "drafts": out.stats.num_drafts,
                          "accepted": out.stats.num_accepted_tokens}), flush=True)


if __name__ == "__main__":
    main()
