"""`trtspec build`: one YAML build config -> TensorRT-LLM checkpoints/engines or a torch bundle. Thin."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click


@click.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the plan (commands, derived values) and change nothing.")
@click.option("--only", type=click.Choice(["convert", "engines"]), help="Run one stage of the plan.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Output directory (overrides `output:`).")
@click.option("--schema", is_flag=True, help="Print the build config JSON schema and exit.")
@click.option("--backend", type=click.Choice(["tensorrtllm", "torch"]), help="Override `backend:` in the config.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan / result as JSON.")
@click.option("--example", metavar="NAME",
              help="Print the shipped example build config NAME (its output: set to out/build/NAME) and exit.")
@click.option("--list-examples", is_flag=True, help="List the shipped example build configs and exit.")
def build(config: Path | None, dry_run: bool, only: str | None, out: Path | None, schema: bool, backend: str | None,
          as_json: bool, example: str | None, list_examples: bool) -> None:
    """Plan and build a speculative-decoding deployment from CONFIG (YAML): TensorRT-LLM's PyTorch workflow (LLM-API
    options for trtllm-serve, Triton's llmapi model and Dynamo; the default where the target has LLM-API facts),
    its engine workflow (convert_checkpoint.py + trtllm-build), or a torch bundle.

    Examples:

    \b
        trtspec build --list-examples
        trtspec build --example llama3.1-8b-eagle3 > 8b.yaml && trtspec build 8b.yaml --dry-run
        trtspec build --example tiny-torch > tiny-torch.yaml && trtspec build tiny-torch.yaml

    MTP (method: mtp, the target's own MTP layers: DeepSeek-V3/R1 num_nextn_predict_layers, the `mtp:` section) is
    the PyTorch workflow's only: see the example deepseek-v3-mtp and docs/targets.md, "MTP".
    """
    from trtspec.config import BuildSpec, load_build_spec
    from trtspec.errors import ToolNotFoundError, UsageError

    if schema:
        click.echo(json.dumps(BuildSpec.model_json_schema(), indent=2))
        return
    if list_examples or example:
        if config is not None:
            raise UsageError(f"CONFIG {config} and --example/--list-examples do not go together",
                             hint="save the example first: `trtspec build --example NAME > NAME.yaml`, then "
                                  "`trtspec build NAME.yaml`")
        _examples(example, as_json)
        return
    if config is None:
        raise UsageError("CONFIG is required", hint="start from an example: `trtspec build --example tiny-torch > "
                                                    "tiny-torch.yaml` (`trtspec build --list-examples` lists them)")
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight

    overrides = {k: v for k, v in (("backend", backend), ("output", str(out.resolve()) if out else None)) if v}
    spec = load_build_spec(config, overrides=overrides)
    resolved = run_preflight(spec, dry_run=dry_run)
    plan = plan_build(resolved)
    out_dir = Path(spec.output)
    if dry_run:
        from trtspec.build.execute import derived_values

        derived = derived_values(resolved)
        if as_json:
            click.echo(json.dumps({"out": str(out_dir), "plan": plan.to_dict(), "derived": derived}, indent=2))
            return
        click.echo(plan.render())
        click.echo(f"# output: {out_dir}")
        click.echo(f"# max_draft_len: {derived['max_draft_len']}")
        for check in derived["checks"]:
            click.echo(f"# check {check['status']:9} {check['name']}: {check['detail']}")
        return

    from trtspec.build.execute import execute

    result = execute(plan, resolved, out_dir, only=only)
    summary = {"out": str(result.out_dir), "done": result.done, "skipped": result.skipped, "pending": result.pending,
               "serve": result.manifest.get("serve", {})}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(f"trtspec build: {len(result.done)} step(s) done, {len(result.skipped)} skipped (unchanged), "
                   f"{len(result.pending)} pending -> {result.out_dir}")
        for item in result.pending:
            click.echo(f"  pending {item['id']} (run in {item['container']}):\n    {item['command']}")
        for check in result.manifest.get("pending_checks", []):
            click.echo(f"  check pending {check['name']} (where the checkpoints are): {check['detail']}")
        for form, item in result.manifest.get("serve", {}).items():
            click.echo(f"  serve with {form} (in {item['container']}):\n    {item['command']}")
    stage_steps = {s.id for s in plan.select(only)}
    blocked = [p for p in result.pending if p["id"] in stage_steps]
    if blocked:
        image = spec.trtllm.image()
        raise ToolNotFoundError(
            f"needs TensorRT-LLM: {len(blocked)} step(s) pending ({', '.join(p['id'] for p in blocked)}); "
            f"completed steps are recorded in {result.out_dir / 'trtspec-manifest.json'}",
            hint=f"run the pending commands inside {image}, or `{shlex.join(['trtspec', 'build', str(config), '--only', 'convert'])}` here")


def _examples(name: str | None, as_json: bool) -> None:
    """Print example `name`, ready to save as a YAML file (without a name: list the examples, one a line)."""
    from trtspec.resources import example_names, example_summary, example_text

    if name:
        click.echo(example_text(name), nl=False)
        return
    names = example_names()
    if as_json:
        click.echo(json.dumps([{"name": n, "summary": example_summary(n)} for n in names], indent=2))
        return
    width = max(len(n) for n in names)
    for n in names:
        click.echo(f"{n:{width}}  {example_summary(n)}")
    click.echo("Save one with: trtspec build --example NAME > NAME.yaml")
