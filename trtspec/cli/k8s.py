"""`trtspec k8s CONFIG --out DIR`: a build config -> NVIDIA Dynamo TensorRT-LLM worker configs (engine config YAML with
the target release's speculative_config) and a DynamoGraphDeployment for Dynamo's Kubernetes operator (dynamo/k8s.py),
checked against Dynamo's facts; prints the launch commands. Nothing runs here: GPU clusters run the output."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from trtspec.dynamo.k8s import API_VERSIONS
from trtspec.errors import ConfigError, shown_text


class _OutDir(click.Path):
    """A directory path the file system can hold (no NUL, encodable, within PATH_MAX / NAME_MAX bytes), checked
    before click's own checks (which would raise on a NUL)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from trtspec.config import NAME_MAX, PATH_MAX

        text = os.fsdecode(value) if isinstance(value, bytes) else str(value)
        try:
            encoded = os.fsencode(text)
        except UnicodeError:
            encoded = None
        if "\0" in text:
            self.fail(f"{shown_text(text)} contains a NUL character", param, ctx)
        if encoded is None:
            self.fail(f"{shown_text(text)} is not encodable as a file name", param, ctx)
        if len(encoded) > PATH_MAX or any(len(part) > NAME_MAX for part in encoded.split(b"/")):
            self.fail(f"{shown_text(text)} is longer than the file system allows ({PATH_MAX} bytes, {NAME_MAX} per "
                      "name)", param, ctx)
        return super().convert(value, param, ctx)


@click.command()
@click.argument("config", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--out", type=_OutDir(path_type=Path, file_okay=False), required=True,
              help="Directory for engine_configs/*.yaml and dynamo-graph.yaml.")
@click.option("--mode", type=click.Choice(["agg", "disagg"]), default="agg", show_default=True,
              help="agg: one worker kind; disagg: prefill and decode workers.")
@click.option("--trtllm-version", default=None, metavar="VERSION",
              help="The TensorRT-LLM release inside the image, whose LLM-API options are written (default: the one "
                   "Dynamo's runtime image runs, 1.3.0rc29; another release needs --image naming an image that runs "
                   "it).")
@click.option("--api-version", type=click.Choice(API_VERSIONS), default=API_VERSIONS[0], show_default=True,
              help="DynamoGraphDeployment version: v1beta1 (spec.components, what Dynamo 1.6.1's tools write) or the "
                   "legacy v1alpha1 (spec.services) its operator still accepts.")
@click.option("--image", default=None, help="Worker and frontend image (default: Dynamo's TensorRT-LLM runtime).")
@click.option("--name", "deployment_name", default=None, metavar="NAME",
              help="The DynamoGraphDeployment's metadata.name: lower-case letters, digits and '-' (default: the "
                   "config's name).")
@click.option("--served-model-name", default=None, help="OpenAI model name (default: the config's name).")
@click.option("--dry-run", is_flag=True, help="Check and print the commands and files; write nothing.")
def k8s(config: Path, out: Path, mode: str, trtllm_version: str | None, api_version: str, image: str | None,
        deployment_name: str | None, served_model_name: str | None, dry_run: bool) -> None:
    """Render NVIDIA Dynamo TensorRT-LLM worker configs and a Kubernetes DynamoGraphDeployment from CONFIG.

    Examples:

    \b
        trtspec k8s build_configs/llama3.1-8b-eagle3.yaml --name llama-8b --out out/dynamo
        trtspec k8s build_configs/llama3.1-8b-eagle3.yaml --mode disagg --out out/dynamo-disagg --dry-run
        trtspec k8s 8b.yaml --image registry.example/dynamo-trtllm:1.2.1 --trtllm-version 1.2.1 --out out/d121
    """
    from trtspec.atomic import write_text
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_build_spec
    from trtspec.contracts.engine import spelled
    from trtspec.dynamo.k8s import k8s_name, nearest_name, render
    from trtspec.dynamo.k8s_yaml import comment, inline

    spec = load_build_spec(config)
    name = spec.name if deployment_name is None else deployment_name
    if name is None:
        suggestion = nearest_name(config.stem)
        raise ConfigError("name", None, "is required: it is the DynamoGraphDeployment's metadata.name",
                          hint=f"add `name: {suggestion}` to {inline(config)}, or pass --name {suggestion}")
    from trtspec.build.llm_api import LlmApiRefusal
    from trtspec.build.plan import llm_api_for_release, llm_api_notes_for_release
    from trtspec.dynamo.k8s import dynamo_facts
    from trtspec.targets import SUPPORTED_TARGETS

    release = trtllm_version or dynamo_facts()["trtllm_pin"]["tensorrt_llm"]  # the release inside the image
    if release in SUPPORTED_TARGETS:  # a build target: plan the build for it
        spec = spec.model_copy(update={"trtllm": spec.trtllm.model_copy(update={"version": release})})
    derived = None
    if deployment_name is None and "\n" not in name and "\0" not in name:  # the config's name, made a k8s name
        name, derived = k8s_name(name, mode)
    # a release with LLM-API facts only (Dynamo's 1.3.0rc29): its facts decide the method's decoding type (suffix:
    # SA, which the build target 1.2.1 lacks), and the options are that release's (llm_api_for_release)
    other = release != spec.trtllm.version
    extra: tuple[str, ...] = ()
    if other:
        try:
            resolved = run_preflight(spec, dry_run=True, release=release)
            with spelled(lambda field: "--trtllm-version" if field == "trtllm.version" else None):
                options, note = llm_api_for_release(resolved, release), ""
            extra = llm_api_notes_for_release(resolved, release)
        except LlmApiRefusal as refusal:
            resolved = run_preflight(spec, dry_run=True)
            options, note = None, refusal.note()
    else:
        resolved = run_preflight(spec, dry_run=True)
        plan = plan_build(resolved)
        note = "; ".join(n for n in plan.notes if "LLM-API" in n) or "no LLM-API form"
        options = plan.llm_api
    if served_model_name is not None:
        served, served_field = served_model_name, "--served-model-name"
    elif spec.name is not None:
        served, served_field = spec.name, "name"
    else:
        served, served_field = name, "--name"
    fields = {"name": "--name" if deployment_name is not None else "name", "served_model_name": served_field,
              "image": "--image", "model_path": "target", "trtllm_version": "--trtllm-version"}  # render's parameters as this command's user sets them
    try:
        with spelled(fields.get):
            result = render(options, name=name, model_path=resolved.models["target"].path,
                            served_model_name=served, tp_size=spec.engine.tp_size, trtllm_version=release,
                            mode=mode, image=image, api_version=api_version, llm_api_note=note)
    except ConfigError as exc:
        if exc.field != "name" or deployment_name is not None:
            raise
        raise ConfigError("name", exc.value, exc.problem,  # the config's name as the deployment's
                          hint=f"{exc.hint}: set it as `name:` in {inline(config)}, or pass --name") from None
    click.echo(comment("launch on one machine (from --out, the directory that holds engine_configs/; etcd and NATS, "
                       "or --discovery-backend file on one host):"), nl=False)
    for command in result.commands:
        click.echo(command + " &")
    for n in ([derived] if derived else []) + list(extra) + result.notes:
        click.echo(comment(f"note: {n}"), nl=False)
    for rel in result.files:
        click.echo(comment(f"{'would write' if dry_run else 'wrote'} {inline(out / rel)}"), nl=False)
    if dry_run:
        return
    for rel, text in result.files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
