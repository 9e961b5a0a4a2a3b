"""`trtspec deploy`: render a Triton model repository from a build output (reads its trtspec-manifest.json).

The repository follows the Triton contract of one TensorRT-LLM release: the build's `trtllm.version`, or
`--trtllm-version` (see docs/targets.md). `--decoupled` is NVIDIA's decoupled_mode (default off, as NVIDIA's quick
start): streaming needs it, unary gRPC infer and HTTP generate need it off. `--form` picks NVIDIA's repository: the
inflight-batcher model set, or the PyTorch workflow's llmapi model (the default for a PyTorch-workflow build).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from trtspec.cli._engine import DEPLOY, DEPLOY_NOTES, EngineCommand, engine_flags, flag_of, overrides
from trtspec.cli._types import FiniteFloat
from trtspec.contracts.engine import spelled
from trtspec.triton.llmapi import FORMS
from trtspec.triton.repo import BACKENDS


@click.command(cls=EngineCommand)
@click.option("--backend", type=click.Choice(BACKENDS), required=True,
              help="tensorrtllm: TensorRT-LLM engines (C++ backend); torch: the reference engine (Python backend).")
@click.option("--build", "build_dir", type=click.Path(path_type=Path), required=True,
              help="Output directory of `trtspec build` (holds trtspec-manifest.json).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Model repository directory to write.")
@click.option("--max-batch-size", type=click.IntRange(1), default=None,
              help="Triton max_batch_size of every model, in requests (default: the build's max_batch_size).")
@engine_flags(*DEPLOY, notes=DEPLOY_NOTES)
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Hugging Face tokenizer directory for pre/postprocessing (default: the build's target checkpoint).")
@click.option("--trtllm-version", default=None, metavar="VERSION",
              help="TensorRT-LLM release whose Triton contract is rendered (default: the build's trtllm.version, "
                   "else trtspec's default target); one of the supported targets, e.g. 0.19.0.")
@click.option("--form", type=click.Choice(FORMS), default=None,
              help="NVIDIA's repository: inflight (preprocessing, tensorrt_llm, postprocessing, ensemble, BLS) or "
                   "llmapi (the PyTorch workflow's one model, tensorrt_llm: text in, text out). Default: llmapi for a "
                   "PyTorch-workflow build, else inflight.")
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
@click.option("--force", is_flag=True, help="Replace an existing --out repository (only one trtspec rendered).")
@click.option("--dry-run", is_flag=True, help="Check and list the files; write nothing.")
def deploy(backend: str, build_dir: Path, out: Path, max_batch_size: int | None, tokenizer_dir: Path | None,
           trtllm_version: str | None, form: str | None, decoupled: bool, baseline_path: Path | None,
           baseline_temperature: float | None, baseline_suites: str | None, force: bool, dry_run: bool,
           **flags: Any) -> None:
    """Render the Triton model repository for BUILD and print the command that serves it.

    The engine flags (--k, --max-k, --suffix, --log-prompts, ...) override the build's engine
    configuration; the repository serves the result.

    Examples:

    \b
        trtspec deploy --backend torch --build out/build/tiny-torch --out out/triton/tiny-torch --decoupled
        trtspec deploy --backend torch --build out/build/tiny-torch --out out/triton/tiny-gated --k 4 \\
            --draft-len-schedule 1:4,4:2,8:0 --acceptance-window 32 --acceptance-length-threshold 0.5
        trtspec deploy --backend torch --build out/build/tiny-torch --out out/triton/tiny-llmapi --form llmapi \\
            --trtllm-version 1.2.1 --decoupled
    """
    from trtspec.triton.render import write_repository
    from trtspec.triton.repo import RepoSpec, plan_repository, repo_record
    from trtspec.triton.server import Ports, plan_launch

    with spelled(flag_of):
        spec = RepoSpec.from_build(build_dir, backend, engine=overrides(flags), triton_max_batch_size=max_batch_size,
                                   tokenizer_dir=tokenizer_dir.resolve() if tokenizer_dir else None,
                                   trtllm_version=trtllm_version, form=form, decoupled=decoupled)
    if baseline_path is not None:
        spec = replace(spec, baseline=_baseline(spec, baseline_path, baseline_temperature, baseline_suites))
    plan = plan_repository(spec)
    click.echo(f"{'Would write' if dry_run else 'Writing'} {len(plan)} files to {out} "
               f"({backend} flavour, {spec.form} form, method {spec.method}, TensorRT-LLM {spec.trtllm_version} "
               "contract, "
               f"{'decoupled' if spec.decoupled else 'not decoupled'}):")
    for rel in sorted(plan):
        click.echo(f"  {rel}")
    log = spec.engine.prompt_log
    if log is not None:
        click.echo(f"Prompt logging is on: {log.sample_rate:g} of the prompts go to {log.directory}/prompts.jsonl "
                   f"(at most {log.max_mb:g} MiB, rotated); they are user data in clear text.")
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
    if spec.form == "llmapi" and backend == "tensorrtllm":
        from trtspec.triton.llmapi import NVIDIA_MODEL_DIR

        click.echo(f"Note: tensorrt_llm/1/model.py runs NVIDIA's model.py from {NVIDIA_MODEL_DIR} (the container's "
                   "copy of TensorRT-LLM's triton_backend/all_models); elsewhere set TRTSPEC_NVIDIA_LLMAPI_DIR.")
    click.echo("Serve it with:")
    click.echo(f"  {shlex.join(['trtspec', 'serve', _path_arg(out)])}")
    if spec.form == "llmapi":
        endpoint = "generate_stream" if spec.decoupled else "generate"
        body = '{"text_input": "The future of AI is", "sampling_param_max_tokens": 10' + (
            ', "streaming": true}' if spec.decoupled else "}")
        click.echo(f"Ask it (NVIDIA's documented request):\n  curl -X POST localhost:8000/v2/models/tensorrt_llm/"
                   f"{endpoint} -d '{body}'")
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
    max_k = spec.engine.max_k if spec.backend == "torch" else max(getattr(engine, "max_draft_len", 0) or 0, 1)
    return baseline_for(path, method=spec.method, k=spec.engine.default_k, max_k=max_k, temperature=temperature,
                        suites=[s.strip() for s in suites.split(",") if s.strip()] if suites else None)


def _path_arg(path: Path) -> str:
    """A path as a command-line argument: one that starts with `-` gets `./` so it cannot read as an option."""
    text = str(path)
    return f"./{text}" if text.startswith("-") else text
