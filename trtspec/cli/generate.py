"""`trtspec generate`: run the reference engine on one prompt, stream the text, then print acceptance stats.

Thin: parse options, call the library, print. The local path lives in `run_local`; with `--url` the prompt goes to a
served model over gRPC instead (`run_remote`, on trtspec.triton.client).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from trtspec.cli._engine import CHECKPOINT_FLAGS, METHOD_FLAGS, EngineCommand, apply, engine_flags, overrides
from trtspec.cli._types import COUNT, HOST_PORT, NON_NEGATIVE, POSITIVE_COUNT, PROBABILITY, SEED, LiveChoice
from trtspec.errors import ServerError
from trtspec.methods import DEFAULT_METHOD, engine_methods, resolve

TREE_MAX_NODES = 64  # default k (node cap) for tree methods: every node of a 63-node tree


def method_choices() -> list[str]:
    """Engine methods that have a registered proposer, at each use (the registry import is deferred: it pulls in torch,
    and `LiveChoice` calls this only when --method is used, so listing commands stays torch-free)."""
    from trtspec.spec.proposers import runnable_methods

    return sorted(m for m in engine_methods() if m in runnable_methods())


@click.command(cls=EngineCommand)
@click.argument("prompt")
@click.option("--url", type=HOST_PORT, default=None, metavar="HOST:PORT",
              help="Ask a served model over gRPC (e.g. localhost:8001) instead of running the engine here.")
@click.option("--model", default=None,
              help="Local: the target, embedded name or HF directory (default tiny). With --url: the Triton model "
                   "(default: the first the server has of ensemble, tensorrt_llm_bls, tensorrt_llm; its form, "
                   "inflight or llmapi, is read from its config; tensorrt_llm of an inflight repository for token "
                   "ids and k per request on the torch flavour; tensorrt_llm_bls for draft-target with --k).")
@click.option("--stream", is_flag=True,
              help="With --url: print the text as the server streams it (needs `trtspec deploy --decoupled`).")
@click.option("--draft", default="tiny-draft", show_default=True,
              help="Draft model for --method draft_target (embedded name or directory).")
@click.option("--method", type=LiveChoice(method_choices), default=DEFAULT_METHOD, show_default=True,
              help="Speculative method (registry: methods with a reference-engine proposer).")
@click.option("--k", "k", type=COUNT, default=None,
              help="Draft tokens per step (0 = plain decoding) [default: 4; medusa: the whole tree; lookahead: G x (N - 1); with "
                   "--url: the deployment's own; a k is sent as num_draft_tokens: --model tensorrt_llm (torch "
                   "flavour) or tensorrt_llm_bls (draft-target through the draft model)].")
@click.option("--medusa", default="tiny-medusa", show_default=True,
              help="Medusa heads for --method medusa: embedded name or directory (HF Medusa or TensorRT-LLM layout).")
@click.option("--eagle", default="tiny-eagle", show_default=True,
              help="EAGLE-3 drafter for --method eagle3: embedded name or directory (HF EAGLE-3 layout).")
@engine_flags(CHECKPOINT_FLAGS)  # a registered method's checkpoint flag that generate has no option of its own for
@click.option("--choices", "medusa_choices", default=None,
              help="Static tree for --method medusa / eagle3: preset (mc_sim_7b_63), JSON/YAML file or text, or "
                   "'{0}, {0, 0}' [default: medusa: the heads' tuned tree, else mc_sim_7b_63 cut to the heads; "
                   "eagle3: a dynamic tree (EAGLE-2, top-4 per node, 6 levels)].")
@click.option("--typical", is_flag=True,
              help="LOSSY: Medusa typical acceptance for tree drafts at temperature > 0 (accepts more tokens, but the "
                   "output no longer follows the target distribution). Default: exact recursive rejection sampling.")
@click.option("--temperature", type=NON_NEGATIVE, default=0.0, show_default=True, help="Sampling temperature (0 = greedy).")
@click.option("--top-k", type=COUNT, default=0, show_default=True, help="Keep the k most likely tokens (0 = off).")
@click.option("--top-p", type=PROBABILITY, default=1.0, show_default=True, help="Nucleus mass in (0, 1] (1 = off).")
@click.option("--max-new-tokens", type=POSITIVE_COUNT, default=128, show_default=True, help="Tokens to generate at most.")
@click.option("--seed", type=SEED, default=None, help="Per-request sampling seed (default: random).")
@click.option("--max-k", type=click.IntRange(0, 1024), default=8, show_default=True, help="Largest k the engine accepts.")
@click.option("--device", default="cpu", show_default=True, help="torch device (cpu, cuda, cuda:1).")
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16"]), default="float32", show_default=True,
              help="Weight and KV-cache dtype.")
@click.option("--threads", type=click.IntRange(0, 4096), default=1, show_default=True,
              help="torch CPU threads (0 = torch's default). Small models at batch 1 run best on one thread.")
@click.option("--lookahead", default="4,4,4", show_default=True, metavar="W,N,G",
              help="Lookahead window size, n-gram size, verification set size (for --method lookahead).")
@engine_flags(METHOD_FLAGS)  # the registered methods' other flags (--suffix, --eagle-topk, ...), as `trtspec serve`'s
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (text, token_ids, stats) instead.")
@click.option("--tap", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="With --url: append the request's acceptance (the served model's perf outputs) as one line to "
                   "this file, which `trtspec monitor --metrics tap:FILE` reads (docs/operations.md).")
def generate(prompt: str, url: str | None, model: str | None, stream: bool, draft: str, method: str, k: int | None,
             medusa: str, eagle: str, medusa_choices: str | None, typical: bool, temperature: float, top_k: int, top_p: float,
             max_new_tokens: int, seed: int | None, max_k: int, device: str, dtype: str, threads: int,
             lookahead: str, as_json: bool, tap: Path | None, **engine: Any) -> None:
    """Generate a continuation of PROMPT with speculative decoding on the reference (PyTorch) engine, or, with
    --url, with a model served by Triton (`trtspec serve`).

    Examples:

    \b
        trtspec generate --model tiny --draft tiny-draft --method draft_target --k 4 "def fibonacci(n):"
        trtspec generate --method ngram --k 6 --json "def fibonacci(n):"
        trtspec generate --url localhost:8001 --model tensorrt_llm --k 6 "def fibonacci(n):"
    """
    from trtspec.errors import UsageError
    from trtspec.spec.params import SamplingParams, SpecParams

    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as lone surrogates
        raise UsageError("PROMPT is not valid UTF-8 text",
                         hint="pass the prompt as UTF-8 (check the shell's locale)") from None
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                              max_new_tokens=max_new_tokens).validate()
    if tap is not None and url is None:
        raise UsageError("--tap records what a served model answers: it needs --url HOST:PORT",
                         hint="add --url (Triton's gRPC port), or leave --tap out")
    if url is not None:
        given = [flag for flag in (f"--{k.removeprefix('engine_').replace('_', '-')}" for k, v in engine.items()
                                   if v not in (None, ()))]
        if given:
            raise UsageError(f"{given[0]} configures the engine generate runs here; with --url the served model has "
                             "its own", hint=f"leave {given[0]} out, or drop --url")
        remote = run_remote(prompt, url=url, model=model, k=k, sampling=sampling, stream=stream,
                            on_text=None if as_json else _echo_text)
        if tap is not None:
            tap_request(tap, remote)
        click.echo(json.dumps(remote) if as_json else "\n" + format_remote_stats(remote))
        return
    if threads > 0:
        import torch

        torch.set_num_threads(threads)  # the application's choice; the library never changes it
    from trtspec.methods import lookahead_trie_nodes, parse_lookahead

    model = model or "tiny"
    info = resolve(method)
    tree = info.tree
    window, ngram, verification_set = parse_lookahead(lookahead, field="--lookahead")
    # tree-shaped drafts: k counts tree nodes (Medusa: the whole tree; lookahead: G candidates of N - 1 tokens)
    by_nodes = tree or info.jacobi
    if k is None:
        k = TREE_MAX_NODES if tree else lookahead_trie_nodes(window, ngram, verification_set) \
            if info.jacobi else 4
    if by_nodes:
        max_k = max(max_k, k)
    spec = SpecParams(method=method, k=k if not info.baseline else 0, acceptance="typical_lossy" if typical else "exact")
    options = _proposer_options((window, ngram, verification_set), medusa_choices, method)
    config = _engine_config(model, method, options, engine, draft=draft if info.needs_draft_model else None,
                            device=device, dtype=dtype)
    result = run_local(prompt, model=model, draft=draft, sampling=sampling, spec=spec, max_k=max_k, device=device,
                       dtype=dtype, on_text=None if as_json else _echo_text, medusa=medusa, eagle=eagle,
                       options=_with_method_flags(options, method, config),
                       draft_runtime=config.draft_runtime if config is not None else "torch")
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo("")
        click.echo(format_stats(result))


def run_local(prompt: str, *, model: str, draft: str, sampling: Any, spec: Any, max_k: int, device: str, dtype: str,
              on_text: Any = None, options: Any = None,
              medusa: str | None = None, eagle: str | None = None, draft_runtime: str = "torch") -> dict[str, Any]:
    """Load the engine, stream one request, and return {text, token_ids, finish_reason, **stats}.

    Args:
        on_text: called with each decoded text delta as it is produced (None = silent).
        draft_runtime: what runs the draft model (EngineConfig.draft_runtime: torch, or onnx for ONNX Runtime).
    """
    from trtspec.methods import resolve
    from trtspec.spec.engine import SpecEngine

    spec.validate(max_k=max_k)
    info = resolve(spec.method)
    from trtspec.devices import check_device

    check_device(device, field="--device")
    engine = SpecEngine.from_pretrained(model, draft if info.needs_draft_model else None,
                                        medusa if info.needs_medusa_heads else None,
                                        eagle=eagle if info.needs_eagle_drafter else None, max_k=max_k, device=device,
                                        dtype=dtype, options=options, draft_runtime=draft_runtime)
    token_ids: list[int] = []
    final = None
    for delta in engine.stream(prompt, sampling, spec):
        token_ids.extend(delta.token_ids)
        if on_text is not None and delta.text:
            on_text(delta.text)
        final = delta
    if final is None or final.stats is None:  # the engine always ends a stream with a finished delta
        raise ServerError("generation ended without its final result", hint="rerun with --debug and report it")
    return {"text": engine.decode(token_ids), "token_ids": token_ids, "finish_reason": final.finish_reason,
            "method": spec.method, "k": spec.k, "acceptance": spec.acceptance,
            "lossless": spec.acceptance == "exact", **final.stats.to_dict()}


def _proposer_options(lookahead: tuple[int, int, int], choices: str | None, method: str) -> Any:
    """The proposers' typed parts of `generate`'s flags: lookahead's (W, N, G), and --choices as the method's tree."""
    from trtspec import choices as tree_choices
    from trtspec.contracts.engine import EagleTree, Lookahead, MedusaTree, ProposerOptions

    trees: dict[str, Any] = {}
    if choices is not None and resolve(method).needs_eagle_drafter:  # EAGLE-3: a static tree or a dynamic shape
        trees["eagle_tree"] = EagleTree.parse(choices, field="--choices")
    elif choices is not None:
        trees["medusa_tree"] = MedusaTree(choices=tuple(map(tuple, tree_choices.parse(choices, field="--choices"))))
    return ProposerOptions(lookahead=Lookahead(*lookahead), **trees)


def _engine_config(model: str, method: str, options: Any, values: dict[str, Any], *, draft: str | None, device: str,
                   dtype: str) -> Any:
    """The EngineConfig of the method flags generate lists from the homes (--suffix, --eagle-topk, --draft-runtime, a
    new method's) over generate's own model, method, draft, device, dtype and the method's part of `options`, checked
    by EngineConfig as `trtspec serve --dynamo` checks them (a knob of another method is refused), an error naming the
    flag; None when no such flag is given."""
    from trtspec.contracts.engine import EngineConfig

    if not overrides(values):
        return None
    part = resolve(method).engine_part
    own = {part: getattr(options, part)} if part and hasattr(options, part) else {}
    return apply(EngineConfig(target=model, method=method, draft=draft, device=device, dtype=dtype, **own), values)


def _with_method_flags(options: Any, method: str, config: Any) -> Any:
    """`options` with the method's own part as `config` (`_engine_config`) sets it; `options` when it sets none."""
    from dataclasses import replace

    part = resolve(method).engine_part
    if config is None or not part or not hasattr(options, part):
        return options
    return replace(options, **{part: getattr(config.proposer_options(), part)})


def run_remote(prompt: str, *, url: str, model: str | None, k: int | None, sampling: Any, stream: bool,
               on_text: Any = None) -> dict[str, Any]:
    """Send one request to a Triton server over gRPC; return {text, token_ids, acceptance counters, model, form, url}.

    Args:
        model: the served model to ask; None = the first the server has of ensemble, tensorrt_llm_bls, tensorrt_llm
            (TritonClient.generating_model). Its form (text, tokens, llmapi) comes from its config.
        k: num_draft_tokens for the request (None = the deployment's default).
        on_text: called with the text as it arrives (each streamed chunk, or the whole text once).
    """
    from trtspec.triton.client import Completion, TritonClient

    options = {"max_tokens": sampling.max_new_tokens, "k": k, "temperature": sampling.temperature,
               "top_k": sampling.top_k, "top_p": sampling.top_p, "seed": sampling.seed}
    start = time.perf_counter()
    with TritonClient(url, model=model) as client:
        if model is None:
            client.use(client.generating_model())
        if stream:
            chunks = []
            for chunk in client.stream(prompt, **options):
                if on_text is not None and chunk.text:
                    on_text(chunk.text)
                chunks.append(chunk)
            out = Completion.from_chunks(chunks)
        else:
            out = client.generate(prompt, **options)
            if on_text is not None:
                on_text(out.text)
    return {"text": out.text, "token_ids": out.token_ids, "url": url, "model": client.model, "form": client.form,
            "k": k,
            "acceptance_rate": out.acceptance_rate, "total_accepted_draft_tokens": out.total_accepted_draft_tokens,
            "total_draft_tokens": out.total_draft_tokens, "num_drafts": out.num_drafts,
            "mean_acceptance_length": out.mean_acceptance_length, "responses": len(out.chunks),
            "wall_time_s": time.perf_counter() - start}


def tap_request(path: Path, result: dict[str, Any]) -> None:
    """Append one served request's acceptance to the tap file `path` (contracts/acceptance_tap.py); UsageError when
    the model answered no perf outputs (a server without speculation, or one that does not return them)."""
    from trtspec.contracts.acceptance_tap import TapRecord, TapWriter
    from trtspec.errors import UsageError

    if result["total_draft_tokens"] is None:
        raise UsageError(f"--tap {path}: {result['model']} answered no acceptance outputs (total_draft_tokens)",
                         hint="ask a speculating model that returns them (tensorrt_llm, ensemble, tensorrt_llm_bls)")
    TapWriter(path).append(TapRecord(
        time=time.time(), model=result["model"],
        output_tokens=len(result["token_ids"]) if result["token_ids"] or not result["text"] else None,
        total_draft_tokens=int(result["total_draft_tokens"]),
        total_accepted_draft_tokens=int(result["total_accepted_draft_tokens"] or 0),
        num_drafts=None if result["num_drafts"] is None else int(result["num_drafts"]),
        latency_s=result["wall_time_s"]))


def format_remote_stats(result: dict[str, Any]) -> str:
    """One human line for a served request: tokens, responses, acceptance (when the model reports it)."""
    size = f"{len(result['token_ids'])} tokens" if result["token_ids"] or not result["text"] else "text"
    line = (f"[{size} in {result['responses']} response(s), {result['wall_time_s']:.2f}s, "
            f"model={result['model']} ({result['form']} form) at {result['url']}")
    if result["total_draft_tokens"]:
        line += (f", acceptance rate {result['acceptance_rate']:.2f} ({result['total_accepted_draft_tokens']}/"
                 f"{result['total_draft_tokens']} draft tokens)")
    if result["mean_acceptance_length"] is not None:
        line += f", mean acceptance length {result['mean_acceptance_length']:.2f}"
    return line + "]"


def format_stats(result: dict[str, Any]) -> str:
    """One human line: tokens, speed, acceptance and the time split."""
    lossy = "" if result.get("lossless", True) else f" acceptance={result['acceptance']} (LOSSY),"
    return (f"[{result['num_emitted_tokens']} tokens, {result['tokens_per_s']:.1f} tok/s, method={result['method']} "
            f"k={result['k']},{lossy} mean acceptance length {result['mean_acceptance_length']:.2f}, acceptance rate "
            f"{result['acceptance_rate']:.2f}, {result['tokens_per_target_forward']:.2f} tokens/target forward, "
            f"time draft {result['draft_time_s']:.2f}s / target {result['target_time_s']:.2f}s / overhead "
            f"{result['overhead_time_s']:.2f}s, finish={result['finish_reason']}]")


def _echo_text(text: str) -> None:
    click.echo(text, nl=False)
    sys.stdout.flush()
