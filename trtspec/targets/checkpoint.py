"""A target's checkpoint facts as checks: the config.json keys a release reads, the tensors its model class loads, and
the flags of its `examples/<dir>/convert_checkpoint.py` scripts. Pure (no torch): checkpoints are described by their
config mapping and tensor names (or a name -> dtype/shape header mapping).

Facts live in the data files' `checkpoint` and `examples` sections (sources recorded there; docs/targets.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trtspec.errors import ConfigError

if TYPE_CHECKING:
    from trtspec.targets import TrtllmTarget

# config.json `dtype` -> safetensors header dtype
SAFETENSORS_DTYPES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32"}


def _medusa() -> str:
    """The checkpoint facts' section of Medusa checkpoints (MedusaForCausalLM): the method's name."""
    from trtspec.methods.medusa import MEDUSA  # trtspec.methods imports trtspec.targets

    return MEDUSA.name


def _target(target: TrtllmTarget | str) -> TrtllmTarget:
    from trtspec.targets import load_target

    return load_target(target) if isinstance(target, str) else target


def checkpoint_keys(target: TrtllmTarget | str, architecture: str) -> frozenset[str]:
    """The config.json keys the release reads for `architecture` (LlamaForCausalLM or MedusaForCausalLM)."""
    facts = _target(target).checkpoint
    keys = set(facts["common_keys"]["keys"]) | set(facts["llama"]["keys"])
    medusa = facts[_medusa()]
    if architecture == medusa["architecture"]:
        keys |= set(medusa["keys"]) | set(medusa.get("read_keys", []))
    elif architecture != facts["llama"]["architecture"]:
        raise ConfigError("architecture", architecture, "has no checkpoint facts in the target data files",
                          hint=f"facts exist for {facts['llama']['architecture']} and {medusa['architecture']}")
    return frozenset(keys)


def checkpoint_tensor_names(config: Mapping[str, Any], target: TrtllmTarget | str) -> set[str]:
    """Every tensor the release's model class loads from a single-rank checkpoint with this config.json: the Llama
    names, the q/k/v + dense biases when `attn_bias`, the fc/gate/proj biases when `mlp_bias`, and per Medusa head
    its layers' `linear.weight` and `linear.bias` and its `lm_head.weight`."""
    facts = _target(target).checkpoint
    tensors = facts["llama_tensors"]
    per_layer = list(tensors["per_layer"])
    if config.get("attn_bias"):
        per_layer += tensors["per_layer_if_attn_bias"]
    if config.get("mlp_bias"):
        per_layer += tensors["per_layer_if_mlp_bias"]
    names = set(tensors["global"])
    names |= {name.format(i=i) for i in range(config["num_hidden_layers"]) for name in per_layer}
    medusa = facts[_medusa()]
    if config.get("architecture") == medusa["architecture"]:
        per_head = medusa["tensors"]["per_head"]
        names |= {name.format(h=h, l=layer) for h in range(config["num_medusa_heads"])
                  for layer in range(config["num_medusa_layers"]) for name in per_head}
    return names


def diff_checkpoint(config: Mapping[str, Any], tensors: Mapping[str, Any] | Iterable[str],
                    target: TrtllmTarget | str) -> list[str]:
    """Problems of a converted checkpoint against the release's facts: config keys it does not read (or reads under
    another name), tensors missing or not loaded, and, when `tensors` maps names to safetensors header entries
    ({"dtype": "F16", ...}) or dtype strings, weights whose dtype is not the config's `dtype`."""
    target = _target(target)
    facts = target.checkpoint
    problems = []
    known = checkpoint_keys(target, config.get("architecture", "?"))
    not_read = set(facts["common_keys"].get("not_read", [])) | set(facts["llama"].get("not_read", []))
    for key in sorted(set(config) - known):
        why = "is not read" if key in not_read else "is not a key it reads"
        problems.append(f"config.{key}: {why} by TensorRT-LLM {target.version}")
    expected = checkpoint_tensor_names(config, target)
    names = set(tensors)
    problems += [f"tensor {name}: missing (TensorRT-LLM {target.version} requires it)" for name in sorted(expected - names)]
    problems += [f"tensor {name}: not loaded by TensorRT-LLM {target.version}" for name in sorted(names - expected)]
    want = SAFETENSORS_DTYPES.get(str(config.get("dtype")))
    if isinstance(tensors, Mapping) and want:
        for name, info in sorted(tensors.items()):
            dtype = info.get("dtype") if isinstance(info, Mapping) else info
            if dtype is not None and dtype != want:
                problems.append(f"tensor {name}: dtype {dtype}, config dtype {config['dtype']} ({want})")
    return problems


def diff_convert_argv(argv: Iterable[str], target: TrtllmTarget | str, examples_dir: str) -> list[str]:
    """Problems of one TensorRT-LLM conversion command (`python3 <examples_dir>/<dir>/convert_checkpoint.py ...` or
    `.../quantization/quantize.py ...`): a script path the release does not have, flags its script lacks."""
    target = _target(target)
    args = list(argv)
    if len(args) < 2:
        return [f"{' '.join(args)}: not a conversion command"]
    script, root = args[1], examples_dir.rstrip("/")
    examples = target.examples
    scripts = {f"{root}/{rel.removeprefix('examples/')}/convert_checkpoint.py": name
               for name, rel in examples["dirs"].items()}
    scripts[f"{root}/{examples['dirs']['quantization'].removeprefix('examples/')}/quantize.py"] = "quantize"
    kind = scripts.get(script)
    if kind is None:
        return [f"{script}: not a conversion script of TensorRT-LLM {target.version} (examples layout "
                f"{examples['layout']}: {', '.join(sorted(scripts))})"]
    flags = examples["convert_checkpoint_args"].get(kind)
    if flags is None:
        return [f"{script}: no recorded flags for examples/{kind} in the TensorRT-LLM {target.version} facts"]
    return [f"{arg}: not a flag of {script} in TensorRT-LLM {target.version}"
            for arg in args[2:] if arg.startswith("--") and arg not in flags]
