"""`trtspec sweep`: run (or resume) an accept-rate sweep into a results JSONL file."""

from __future__ import annotations

import click

from trtspec.cli._types import HOST_PORT, POSITIVE_COUNT, SEED, FiniteFloat
from trtspec.methods import METHODS


@click.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False),
              help="Results JSONL; an existing file is resumed (completed cases are skipped).")
@click.option("--method", "methods", help=f"Comma list of methods ({', '.join(sorted(METHODS))}).")
@click.option("--k", "k", help="Draft lengths, e.g. 0-8 or 1,2,4 (k = 0 is plain decoding, always included).")
@click.option("--temperature", "temperatures", help="Comma list of temperatures, e.g. 0,1.")
@click.option("--suite", "suites",
              help="Comma list of shipped suites (code, prose, grounded, repetitive) or JSONL paths.")
@click.option("--concurrency", help="Comma list of requests in flight, e.g. 1,4.")
@click.option("--model", help="Target model: embedded name (tiny) or HF directory.")
@click.option("--draft", "drafts", help="Comma list of draft models for draft_target.")
@click.option("--draft-runtime", type=click.Choice(["torch", "onnx"]),
              help="What runs the draft models (via engine): torch, or onnx (ONNX Runtime, float32 on the CPU; needs "
                   "trtspec[onnx]). Its cases are other cases: a sweep of each into one --out compares the runtimes' "
                   "speed at equal acceptance [default: torch].")
@click.option("--medusa", help="Comma list of Medusa heads directories (method medusa).")
@click.option("--eagle", help="Comma list of EAGLE-3 drafters (method eagle3): embedded name or directory.")
@click.option("--eagle-tree", "eagle_trees",
              help="Comma list of EAGLE trees (eagle3): chain, dynamic, dynamic:TOPKxDEPTH or a choices preset/file "
                   "[default: dynamic].")
@click.option("--suffix-cache", "suffix_cache",
              help="Suffix decoding cache states per suffix case: cold (emptied before the case), warm (the case's "
                   "requests ran once before it), or cold,warm [default: both; via engine].")
@click.option("--max-new-tokens", type=POSITIVE_COUNT, help="Tokens generated per request.")
@click.option("--num-prompts", type=POSITIVE_COUNT, help="Prompts per suite (first N, in file order).")
@click.option("--seed", type=SEED, help="Request i samples with seed + i.")
@click.option("--repeats", type=click.IntRange(1, 1000), help="Measurement rounds over the whole grid (the report takes medians).")
@click.option("--shuffle/--no-shuffle", default=None,
              help="Run each round's cases of every (suite, temperature, concurrency) in a seeded random order.")
@click.option("--max-draft-len", type=click.IntRange(0, 1024), help="The engine's maximum k (tokens).")
@click.option("--via", type=click.Choice(["engine", "triton", "openai"]),
              help="How cases run: engine = the in-process reference engine; triton = a served repository (gRPC); "
                   "openai = an OpenAI endpoint such as `trtspec serve --dynamo N`.")
@click.option("--url", type=HOST_PORT, help="Server host:port: Triton gRPC (via triton), e.g. localhost:8001; OpenAI "
                                           "(via openai), e.g. localhost:8000.")
@click.option("--chat-template", help="Prompts as one-turn chats: `model` (the model's own template) or a Jinja "
                                      "template (via engine).")
@click.option("--flavour", type=click.Choice(["torch", "tensorrtllm"]), help="Served repository flavour (triton).")
@click.option("--model-name", help="Served model to call (default: tensorrt_llm via triton, the model's name via openai).")
@click.option("--bls-model-name", help="Served BLS model that runs TensorRT-LLM draft-target and its k = 0 baseline "
                                      "(via triton, --flavour tensorrtllm; default tensorrt_llm_bls).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=0.001),
              help="Seconds one request to the Triton server may take before it is cancelled (default 120).")
@click.option("--calibration-batch-sizes", help="Batch sizes of the forward-cost micro-benchmark, e.g. 1,4,16.")
@click.option("--calibration-repeats", type=click.IntRange(1, 1000),
              help="Timed rounds of the micro-benchmark; each point's cost is their median (default 5).")
@click.option("--calibration-slices", type=click.IntRange(1, 1000),
              help="Run the micro-benchmark in N slices spread over the cases (the repeats split between them; the "
                   "median over slices), so the calibration spans the time of the runs it prices (default 1).")
@click.option("--threads", type=click.IntRange(0, 4096), help="torch intra-op threads (via engine; default: torch's).")
@click.option("--retry-errors", is_flag=True, help="Rerun cases whose earlier record is an error.")
@click.option("--dry-run", is_flag=True, help="Validate and list the cases; run nothing.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def sweep(config: str | None, out: str, retry_errors: bool, dry_run: bool, no_progress: bool, **flags: object) -> None:
    """Measure acceptance and speed over method x k x draft x temperature x suite x concurrency.

    CONFIG is an optional YAML sweep spec; explicit flags override its values. One JSON record per case is appended
    to --out (flush + fsync per record); rerunning the same command resumes an interrupted sweep.

    Examples:

    \b
        trtspec sweep --method draft_target,ngram --k 0-8 --temperature 0,1 --suite code,grounded --out results.jsonl \\
            && trtspec sweep --method draft_target --k 0-8 --temperature 0,1 --suite code,grounded \\
            --draft-runtime onnx --out results.jsonl
        trtspec sweep --via triton --url localhost:8001 --method draft_target --k 0-4 --out served.jsonl
        trtspec sweep --via openai --url localhost:8000 --method draft_target,ngram --k 0-4 --out dynamo.jsonl
    """
    from trtspec.methods.eagle import EAGLE3
    from trtspec.methods.medusa import MEDUSA
    from trtspec.sweep.grid import SweepSpec, parse_float_list, parse_int_list, parse_str_list
    from trtspec.sweep.records import latest_by_id, read_records
    from trtspec.sweep.runner import run_sweep

    lists = {"methods": lambda v: parse_str_list(v, "method"), "drafts": lambda v: parse_str_list(v, "draft"),
             "suites": lambda v: parse_str_list(v, "suite"),
             MEDUSA.sweep_variant: lambda v: parse_str_list(v, MEDUSA.sweep_variant),
             "k": lambda v: parse_int_list(v, "k"), "concurrency": lambda v: parse_int_list(v, "concurrency"),
             "calibration_batch_sizes": lambda v: parse_int_list(v, "calibration-batch-sizes"),
             "temperatures": lambda v: parse_float_list(v, "temperature"),
             "suffix_cache": lambda v: parse_str_list(v, "suffix-cache"),
             EAGLE3.sweep_variant: lambda v: parse_str_list(v, EAGLE3.sweep_variant),
             "eagle_trees": lambda v: parse_str_list(v, "eagle-tree")}
    overrides = {name: (lists[name](value) if name in lists and value is not None else value)
                 for name, value in flags.items()}
    spec = SweepSpec.from_yaml(config, **overrides) if config else \
        SweepSpec.build(**{k: v for k, v in overrides.items() if v is not None})
    cases = spec.cases()
    if dry_run:
        done = latest_by_id(read_records(out), "case")
        for case in cases:
            state = "done" if case.case_id in done else "todo"
            click.echo(f"{case.case_id}  {state}  {case.label()}")
        click.echo(f"{len(cases)} cases, {sum(c.case_id in done for c in cases)} already in {out}")
        return
    summary = run_sweep(spec, out, show_progress=not no_progress, retry_errors=retry_errors)
    click.echo(f"{summary.ran} cases run, {summary.skipped} already done, {summary.errors} failed, "
               f"{summary.calibrations} calibrations -> {out}")
    for msg in summary.error_messages:
        click.echo(f"  failed: {msg}", err=True)
    click.echo(f"Next: trtspec report {out} --out report/")
    if summary.errors:  # exit 1: the failed cases are error records in --out; --retry-errors runs them again
        raise SystemExit(1)
