"""`trtspec k8s CONFIG --out DIR`: a build config -> NVIDIA Dynamo TensorRT-LLM worker configs (engine config YAML with
the target release's speculative_config) and a DynamoGraphDeployment for Dynamo's Kubernetes operator (dynamo/k8s.py),
checked against Dynamo's facts; prints the launch commands. Nothing runs here: GPU clusters run the output."""

from __future__ import annotations

from pathlib import Path

import click

from trtspec.dynamo.k8s import API_VERSIONS


@click.command()
@click.argument("config", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Directory for engine_configs/*.yaml and dynamo-graph.yaml.")
@click.option("--mode", type=click.Choice(["agg", "disagg"]), default="agg", show_default=True,
              help="agg: one worker kind; disagg: prefill and decode workers.")
@click.option("--trtllm-version", default=None, metavar="VERSION",
              help="TensorRT-LLM release whose LLM-API facts to use (default: the config's trtllm.version).")
@click.option("--api-version", type=click.Choice(API_VERSIONS), default=API_VERSIONS[0], show_default=True,
              help="DynamoGraphDeployment version: v1beta1 (spec.components, what Dynamo 1.6.1's tools write) or the "
                   "legacy v1alpha1 (spec.services) its operator still accepts.")
@click.option("--image", default=None, help="Worker and frontend image (default: Dynamo's TensorRT-LLM runtime).")
@click.option("--served-model-name", default=None, help="OpenAI model name (default: the config's name).")
@click.option("--dry-run", is_flag=True, help="Check and print the commands and files; write nothing.")
def k8s(config: Path, out: Path, mode: str, trtllm_version: str | None, api_version: str, image: str | None,
        served_model_name: str | None, dry_run: bool) -> None:
    """Render NVIDIA Dynamo TensorRT-LLM worker configs and a Kubernetes DynamoGraphDeployment from CONFIG.

    Examples:

    \b
        trtspec build --example llama3.1-8b-ngram > 8b.yaml
        trtspec k8s 8b.yaml --trtllm-version 1.2.1 --out out/dynamo
        trtspec k8s 8b.yaml --trtllm-version 1.2.1 --mode disagg --out out/dynamo-disagg --dry-run
    """
    from trtspec.atomic import write_text
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_build_spec
    from trtspec.dynamo.k8s import render

    spec = load_build_spec(config)
    if trtllm_version is not None:
        spec = spec.model_copy(update={"trtllm": spec.trtllm.model_copy(update={"version": trtllm_version})})
    resolved = run_preflight(spec, dry_run=True)
    plan = plan_build(resolved)
    note = "; ".join(n for n in plan.notes if "LLM-API" in n) or "no LLM-API form"
    result = render(plan.llm_api, name=spec.name, model_path=resolved.models["target"].path,
                    served_model_name=served_model_name or spec.name, tp_size=spec.engine.tp_size,
                    trtllm_version=spec.trtllm.version, mode=mode, image=image, api_version=api_version,
                    llm_api_note=note)
    click.echo("# launch on one machine (from the directory that holds engine_configs/; etcd and NATS, or "
               "--discovery-backend file on one host):")
    for command in result.commands:
        click.echo(command.replace("--extra-engine-args ./", "--extra-engine-args engine_configs/") + " &")
    for n in result.notes:
        click.echo(f"# note: {n}")
    for rel in result.files:
        click.echo(f"# {'would write' if dry_run else 'wrote'} {out / rel}")
    if dry_run:
        return
    for rel, text in result.files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
