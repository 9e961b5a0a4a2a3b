"""`trtspec deploy`: render a Triton model repository from a build output (reads its trtspec-manifest.json).

The repository follows the Triton contract of one TensorRT-LLM release: the build's `trtllm.version`, or
`--trtllm-version` (see docs/targets.md). `--decoupled` is NVIDIA's decoupled_mode (default off, as NVIDIA's quick
start): streaming needs it, unary gRPC infer and HTTP generate need it off.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from trtspec.choices import MAX_DEPTH, MAX_TOPK
from trtspec.cli._types import NAME_VALUE, PROBABILITY, FiniteFloat
from trtspec.triton.engine_params import EngineParams
from trtspec.triton.repo import BACKENDS


@click.command()
@click.option("--backend", type=click.Choice(BACKENDS), required=True,
              help="tensorrtllm: TensorRT-LLM engines (C++ backend); torch: the reference engine (Python backend).")
@click.option("--build", "build_dir", type=click.Path(path_type=Path), required=True,
              help="Output directory of `trtspec build` (holds trtspec-manifest.json).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Model repository directory to write.")
@click.option("--max-batch-size", type=click.IntRange(1), default=None,
              help="Triton max_batch_size of every model, in requests (default: the build's max_batch_size).")
@click.option("--k", "default_k", type=click.IntRange(0), default=None,
              help="Draft tokens per request when a request does not say (default: the build's max_draft_len).")
@click.option("--max-k", type=click.IntRange(1), default=None,
              help="torch: the largest k a request may ask for (default: the build's max_draft_len).")
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Hugging Face tokenizer directory for pre/postprocessing (default: the build's target checkpoint).")
@click.option("--device", default=None, help="torch: where the engine runs (cpu, cuda, cuda:1; default cpu).")
@click.option("--lookahead", default=None, metavar="W,N,G",
              help="tensorrtllm: the server's lookahead (W, N, G); must match the engine's max_draft_len.")
@click.option("--eagle-topk", type=int, default=None,
              help="torch, method eagle3: the dynamic tree's children per expansion (over the build's eagle.topk; "
                   f"1-{MAX_TOPK}; default 4); not with a static tree (eagle.choices).")
@click.option("--eagle-depth", type=int, default=None,
              help="torch, method eagle3: the dynamic tree's levels (over the build's eagle.depth; "
                   f"1-{MAX_DEPTH}; default 6). The node budget is k (--k, --max-k).")
@click.option("--suffix", "suffix", type=NAME_VALUE, multiple=True,
              help="torch, method suffix: one suffix decoding option NAME=VALUE, over the build's (repeatable): "
                   "max_tree_depth, max_cached_requests (the cross-request cache's bound), max_spec_factor, "
                   "max_spec_offset, min_token_prob, tree (true/false).")
@click.option("--trtllm-version", default=None, metavar="VERSION",
              help="TensorRT-LLM release whose Triton contract is rendered (default: the build's trtllm.version, "
                   "else trtspec's default target); one of the supported targets, e.g. 0.19.0.")
@click.option("--decoupled/--no-decoupled", default=False, show_default=True,
              help="NVIDIA's decoupled_mode for tensorrt_llm, tensorrt_llm_draft and tensorrt_llm_bls: streaming "
                   "(stream=true, generate_stream) needs it; unary gRPC infer and HTTP generate need it off.")
@click.option("--baseline", "baseline_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The sweep that chose k (results JSONL of `trtspec sweep`, or a trtspec-baseline.json): stored "
                   "in the repository as the reference of `trtspec monitor` and of the drift alert.")
@click.option("--baseline-temperature", type=FiniteFloat(min=0.0), default=None,
              help="Which temperature of --baseline the server runs at (needed when the sweep has several).")
@click.option("--baseline-suite", "baseline_suites", default=None,
              help="Comma list of --baseline's prompt suites to use (default: all of them).")
@click.option("--log-prompts", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="torch: log a sample of the prompts to DIR/prompts.jsonl (rotating JSONL; the input of `trtspec "
                   "train draft`). Off by default: prompts are user data, stored in clear text (docs/retrain.md).")
@click.option("--log-sample-rate", type=PROBABILITY, default=EngineParams.log_sample_rate, show_default=True,
              help="Share of requests whose prompt is logged (with --log-prompts).")
@click.option("--log-max-mb", type=FiniteFloat(min=0.01, max=1e6), default=EngineParams.log_max_mb,
              show_default=True, help="MiB the prompt log's files may take together; the oldest are dropped.")
@click.option("--force", is_flag=True, help="Replace an existing --out repository (only one trtspec rendered).")
@click.option("--dry-run", is_flag=True, help="Check and list the files; write nothing.")
def deploy(backend: str, build_dir: Path, out: Path, max_batch_size: int | None, default_k: int | None,
           max_k: int | None, tokenizer_dir: Path | None, device: str | None, lookahead: str | None,
           eagle_topk: int | None, eagle_depth: int | None, suffix: tuple[tuple[str, str], ...], trtllm_version: str | None, decoupled: bool,
           log_prompts: Path | None, log_sample_rate: float, log_max_mb: float,
           baseline_path: Path | None, baseline_temperature: float | None, baseline_suites: str | None,
           force: bool, dry_run: bool) -> None:
    """Render the Triton model repository for BUILD and print the command that serves it."""
    from trtspec.triton.render import write_repository
    from trtspec.triton.repo import RepoSpec, plan_repository, repo_record
    from trtspec.triton.server import Ports, plan_launch

    spec = RepoSpec.from_build(build_dir, backend, triton_max_batch_size=max_batch_size, default_k=default_k,
                               max_k=max_k, device=device, lookahead=_lookahead(lookahead), eagle_topk=eagle_topk,
                               eagle_depth=eagle_depth,
                               tokenizer_dir=tokenizer_dir.resolve() if tokenizer_dir else None,
                               trtllm_version=trtllm_version, decoupled=decoupled,
                               log_prompts=log_prompts.resolve() if log_prompts else None,
                               log_sample_rate=log_sample_rate, log_max_mb=log_max_mb, suffix=dict(suffix) or None)
    if baseline_path is not None:
        spec = replace(spec, baseline=_baseline(spec, baseline_path, baseline_temperature, baseline_suites))
    plan = plan_repository(spec)
    click.echo(f"{'Would write' if dry_run else 'Writing'} {len(plan)} files to {out} "
               f"({backend} flavour, method {spec.method}, TensorRT-LLM {spec.trtllm_version} contract, "
               f"{'decoupled' if spec.decoupled else 'not decoupled'}):")
    for rel in sorted(plan):
        click.echo(f"  {rel}")
    if spec.log_prompts is not None:
        click.echo(f"Prompt logging is on: {spec.log_sample_rate:g} of the prompts go to {spec.log_prompts}/prompts.jsonl "
                   f"(at most {spec.log_max_mb:g} MiB, rotated); they are user data in clear text.")
    built_for = spec.build_trtllm_version
    if backend == "tensorrtllm" and built_for and built_for != spec.trtllm_version:
        click.echo(f"Note: the build was planned for TensorRT-LLM {built_for}; an engine loads only in the release "
                   f"that built it, so rebuild with trtllm.version: {spec.trtllm_version} before serving.")
    for role, engine in spec.engines.items():
        if not (engine.path / "config.json").is_file():
            click.echo(f"Note: the {role} engine is not built yet ({engine.path}); run the engine steps of "
                       "`trtspec build` inside a TensorRT-LLM container before serving.")
    if not dry_run:
        keep = [build_dir, *([spec.tokenizer_dir] if spec.tokenizer_dir else [])]  # never inside, over or under
        write_repository(plan, out, force=force, keep=keep)
    if spec.baseline is not None:
        base = spec.baseline
        click.echo(f"Baseline: {base.method} k={base.k} at T={base.temperature:g} on {', '.join(base.suites)}: "
                   f"acceptance per position {', '.join(f'{r:.2f}' for r in base.acceptance_per_pos)}; plain "
                   f"decoding {', '.join(f'{t:.1f} tok/s at {c}' for c, t in base.plain_tokens_per_s.items())}")
    click.echo("Serve it with:")
    click.echo(f"  {shlex.join(['trtspec', 'serve', _path_arg(out)])}")
    if backend == "tensorrtllm":
        launch = plan_launch(out, ports=Ports(), binary=Path("/opt/tritonserver/bin/tritonserver"),
                             record=repo_record(spec))
        if launch.note:
            click.echo(f"  ({launch.note})")
        click.echo(f"or, inside {spec.target.image}:\n  {launch.shell()}")


def _baseline(spec: Any, path: Path, temperature: float | None, suites: str | None) -> Any:
    """The baseline for `spec`: a baseline file as it is, or one made from a sweep's results for the deployment's
    method and k (max_k: the largest k the deployment serves)."""
    from trtspec.sweep.baseline import baseline_for

    engine = spec.engines.get("target")
    max_k = spec.max_k if spec.backend == "torch" else max(getattr(engine, "max_draft_len", 0) or 0, 1)
    return baseline_for(path, method=spec.method, k=spec.default_k, max_k=max_k, temperature=temperature,
                        suites=[s.strip() for s in suites.split(",") if s.strip()] if suites else None)


def _path_arg(path: Path) -> str:
    """A path as a command-line argument: one that starts with `-` gets `./` so it cannot read as an option."""
    text = str(path)
    return f"./{text}" if text.startswith("-") else text


def _lookahead(value: str | None) -> tuple[int, int, int] | None:
    if value is None:
        return None
    try:
        window, ngram, verification = (int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter("expected three integers W,N,G, e.g. 4,4,4", param_hint="--lookahead") from None
    return window, ngram, verification
