"""`trtspec models`: list the embedded models, or check and describe one model (name or directory)."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.argument("model", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models(model: str | None, as_json: bool) -> None:
    """List embedded models, or validate MODEL (embedded name or HF directory) and show its shape.

    Examples:

    \b
        trtspec models
        trtspec models tiny --json
    """
    from trtspec.models import EMBEDDED, embedded_path, is_medusa_heads, read_config, resolve_model, tokenizer_vocab

    if model is None:
        rows = [{"name": n, "description": d} for n, d in EMBEDDED.items()]
        click.echo(json.dumps(rows, indent=2) if as_json else "\n".join(f"{r['name']:12} {r['description']}" for r in rows))
        return
    if is_medusa_heads(embedded_path(model) if model in EMBEDDED else Path(model)):
        _describe_heads(model, as_json)
        return
    path = resolve_model(model)
    cfg = read_config(path)
    info = {
        "model": model,
        "path": str(path),
        "architecture": cfg.get("architectures", ["?"])[0],
        "hidden_size": cfg.get("hidden_size"),
        "num_hidden_layers": cfg.get("num_hidden_layers"),
        "num_attention_heads": cfg.get("num_attention_heads"),
        "vocab_size": cfg.get("vocab_size"),
        "tokenizer_entries": tokenizer_vocab(path),
        "torch_dtype": cfg.get("dtype", cfg.get("torch_dtype")),
    }
    click.echo(json.dumps(info, indent=2) if as_json else "\n".join(f"{k:20} {v}" for k, v in info.items()))


def _describe_heads(name: str, as_json: bool) -> None:
    from trtspec.methods.medusa import MEDUSA
    from trtspec.models import read_config, resolve_medusa

    path = resolve_medusa(name)
    cfg = read_config(path, field=MEDUSA.checkpoint)
    info = {
        "model": name,
        "path": str(path),
        "layout": "TensorRT-LLM Medusa checkpoint" if "num_medusa_heads" in cfg else "HF Medusa (FasterDecoding)",
        "medusa_num_heads": cfg.get("medusa_num_heads", cfg.get("num_medusa_heads")),
        "medusa_num_layers": cfg.get("medusa_num_layers", cfg.get("num_medusa_layers")),
        "hidden_size": cfg.get("hidden_size"),
        "vocab_size": cfg.get("vocab_size"),
        "base_model": cfg.get("base_model_name_or_path"),
    }
    click.echo(json.dumps(info, indent=2) if as_json else "\n".join(f"{k:20} {v}" for k, v in info.items()))
