"""The Triton contract that trtspec renders for one TensorRT-LLM target. The declarations are generated from the
target's facts (`trtspec/targets/trtllm-<version>.json`). No release's names are written here by hand.

A model declares each tensor in SERVED_INPUTS / SERVED_OUTPUTS that the target also declares. In those lists,
`seed` and `min_tokens` stand for the target's request names (`random_seed` and `min_length` up to 0.19.0). The data
type, dims, reshape, ragged-batch and optional flags, and the order, are copied from the facts. For the tensorrt_llm
model, an input the target declares but its C++ backend does not read is left out, and so are names the facts mark
as `overlay` (not pinned to the release). The ensemble is derived from the target's ensemble steps: a route (ensemble
input -> step input, step output -> internal tensor -> next step or ensemble output) is kept when the model at each
end declares the tensor, so the ensemble keeps the target's internal tensor names. Rendering refuses a non-optional
target input that would be left out, and a parameter key that the target does not read. Both flavours render the
same declarations; the torch flavour's engine models add trtspec's EXTENSIONS (optional, declared in no release).

Pure: dataclasses and trtspec.targets. Text is produced here and parsed by render.validate_model_config.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from trtspec.errors import ConfigError
from trtspec.targets import Tensor, TritonModel, TrtllmTarget


class _HasName(Protocol):
    name: str


_Named = TypeVar("_Named", bound=_HasName)
REQUEST_ROLES = ("seed", "min_tokens")  # keys of TrtllmTarget.request_names: names that differ between releases

# The tensors trtspec serves on each model (it declares the subset that the target declares).
SERVED_INPUTS: dict[str, tuple[str, ...]] = {
    # what model_repo/preprocessing/1/model.py reads (no multimodal, encoder text or prompt-table ids)
    "preprocessing": ("QUERY", "REQUEST_OUTPUT_LEN", "BAD_WORDS_DICT", "STOP_WORDS_DICT", "EMBEDDING_BIAS_WORDS",
                      "EMBEDDING_BIAS_WEIGHTS", "END_ID", "PAD_ID"),
    "postprocessing": ("TOKENS_BATCH", "SEQUENCE_LENGTH"),
    # NVIDIA's C++ backend reads all of these. Left out for decoder-only text serving: encoder-decoder, multimodal,
    # disaggregated serving and KV-cache retention. LoRA, prompt tables and guided decoding are declared, so that the
    # torch flavour can refuse them by name (the reference engine has none of them).
    "tensorrt_llm": (
        "input_ids", "input_lengths", "request_output_len", "num_return_sequences", "draft_input_ids",
        "draft_logits", "draft_acceptance_threshold", "end_id", "pad_id", "stop_words_list", "bad_words_list",
        "embedding_bias", "beam_width", "temperature", "runtime_top_k", "runtime_top_p", "runtime_top_p_decay",
        "runtime_top_p_reset_ids", "len_penalty", "early_stopping", "repetition_penalty", "min_tokens",
        "beam_search_diversity_rate", "presence_penalty", "frequency_penalty", "seed", "return_log_probs",
        "return_context_logits", "return_generation_logits", "return_perf_metrics", "return_kv_cache_reuse_stats",
        "exclude_input_in_output", "stop", "streaming", "prompt_embedding_table", "prompt_table_extra_ids",
        "lora_task_id", "lora_weights", "lora_config", "guided_decoding_guide_type", "guided_decoding_guide",
        "lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size",
    ),
    # what model_repo/tensorrt_llm_bls/1/model.py reads (and forwards to the preprocessing and engine models)
    "tensorrt_llm_bls": (
        "text_input", "max_tokens", "bad_words", "stop_words", "exclude_input_in_output", "end_id", "pad_id", "top_k",
        "top_p", "temperature", "length_penalty", "repetition_penalty", "min_tokens", "presence_penalty",
        "frequency_penalty", "seed", "return_log_probs", "return_context_logits", "return_generation_logits",
        "num_return_sequences", "beam_width", "stream", "prompt_embedding_table", "embedding_bias_words",
        "embedding_bias_weights", "num_draft_tokens", "use_draft_logits", "lora_task_id", "lora_weights",
        "lora_config", "return_perf_metrics", "guided_decoding_guide_type", "guided_decoding_guide",
    ),
}  # fmt: skip
PERF_OUTPUTS = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks",
                "arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns",
                "acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")  # return_perf_metrics
SERVED_OUTPUTS: dict[str, tuple[str, ...]] = {
    "preprocessing": ("INPUT_ID", "REQUEST_INPUT_LEN", "BAD_WORDS_IDS", "STOP_WORDS_IDS", "EMBEDDING_BIAS",
                      "REQUEST_OUTPUT_LEN", "OUT_END_ID", "OUT_PAD_ID"),
    "postprocessing": ("OUTPUT",),
    "tensorrt_llm": ("output_ids", "sequence_length", "cum_log_probs", "output_log_probs", "context_logits",
                     "generation_logits", "batch_index", "sequence_index", *PERF_OUTPUTS),
    "tensorrt_llm_bls": ("text_output", "cum_log_probs", "output_log_probs", "context_logits", "generation_logits",
                         "batch_index", "sequence_index", *PERF_OUTPUTS),
}  # fmt: skip
ENSEMBLE_STEPS = ("preprocessing", "tensorrt_llm", "postprocessing")  # the facts' step models, in order


@dataclass(frozen=True)
class Decl:
    """One input or output declaration of a config.pbtxt."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False
    reshape: tuple[int, ...] | None = None
    allow_ragged_batch: bool = False

    def pbtxt(self, kind: str) -> str:
        text = f'{{ name: "{self.name}" data_type: {self.data_type} dims: {_shape(self.dims)}'
        if self.reshape is not None:
            text += f" reshape: {{ shape: {_shape(self.reshape)} }}"
        if kind == "input" and self.allow_ragged_batch:
            text += " allow_ragged_batch: true"
        if kind == "input" and self.optional:
            text += " optional: true"
        return text + " }"


def _shape(dims: Sequence[int]) -> str:
    return f"[ {', '.join(str(d) for d in dims)} ]" if dims else "[ ]"


@dataclass(frozen=True)
class ModelDecls:
    """The inputs and outputs of one rendered model."""

    inputs: tuple[Decl, ...]
    outputs: tuple[Decl, ...]

    def input(self, name: str) -> Decl | None:
        return next((d for d in self.inputs if d.name == name), None)

    def output(self, name: str) -> Decl | None:
        return next((d for d in self.outputs if d.name == name), None)

    @property
    def input_names(self) -> set[str]:
        return {d.name for d in self.inputs}

    @property
    def output_names(self) -> set[str]:
        return {d.name for d in self.outputs}


# trtspec's own additions to the torch flavour's engine models (`tensorrt_llm`, `tensorrt_llm_draft`), declared in no
# TensorRT-LLM release: `num_draft_tokens`, k per request (<= the model's max_k; a TensorRT-LLM engine fixes its draft
# length at build time), and `num_drafts`, the verified drafts of the request (mean acceptance length =
# 1 + total_accepted_draft_tokens / num_drafts), sent with the other perf outputs. Optional, so a client that does not
# know them never sees them; the facts check (tests/triton/contract_check.py) allows exactly these.
EXTENSIONS = ModelDecls(
    inputs=(Decl("num_draft_tokens", "TYPE_INT32", (1,), optional=True, reshape=()),),
    outputs=(Decl("num_drafts", "TYPE_INT32", (1,)),),
)


@dataclass
class Step:
    """One ensemble step: model name and the model-tensor -> ensemble-tensor maps."""

    model_name: str
    input_map: dict[str, str] = field(default_factory=dict)
    output_map: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ensemble:
    decls: ModelDecls
    steps: tuple[Step, ...]


def request_name(target: TrtllmTarget, name: str) -> str:
    """The target's name for a served name: `seed` and `min_tokens` are spelled per release, the rest as given."""
    return target.request_names[name] if name in REQUEST_ROLES else name


def _decl(tensor: Tensor, dtypes: Mapping[str, str], model: str) -> Decl:
    extra = tensor.model_extra or {}
    data_type = tensor.data_type
    if data_type.startswith("${"):
        key = data_type[2:-1]
        if key not in dtypes:
            raise ConfigError(f"{model}.{tensor.name}", data_type, "the target leaves this data type to a template "
                              "value that trtspec does not set", hint=f"add {key} to the data types passed in")
        data_type = dtypes[key]
    reshape = extra.get("reshape")
    return Decl(name=tensor.name, data_type=data_type, dims=tuple(tensor.dims), optional=tensor.optional,
                reshape=tuple(reshape) if reshape is not None else None,
                allow_ragged_batch=bool(extra.get("allow_ragged_batch", False)))


def model_decls(target: TrtllmTarget, model: str, dtypes: Mapping[str, str]) -> ModelDecls:
    """The declarations trtspec renders for `model` (tensorrt_llm_draft = tensorrt_llm) on `target`."""
    base = "tensorrt_llm" if model == "tensorrt_llm_draft" else model
    facts = target.model(base)
    core = base == "tensorrt_llm"
    wanted_in = {request_name(target, n) for n in SERVED_INPUTS[base]}
    wanted_out = set(SERVED_OUTPUTS[base])
    inputs = tuple(_decl(t, dtypes, model) for t in facts.inputs if t.name in wanted_in and not t.overlay
                   and not (core and t.read_by_backend is False))
    outputs = tuple(_decl(t, dtypes, model) for t in _first_of_each(facts.outputs) if t.name in wanted_out and not t.overlay)
    _check_required(target, model, facts, {d.name for d in inputs})
    return ModelDecls(inputs, outputs)


def _first_of_each(items: Iterable[_Named]) -> list[_Named]:
    """Items with repeated names dropped (0.19.0's ensemble lists kv_cache_alloc_total_blocks twice)."""
    seen: set[str] = set()
    return [t for t in items if not (t.name in seen or seen.add(t.name))]


def _check_required(target: TrtllmTarget, model: str, facts: TritonModel, rendered: Collection[str]) -> None:
    missing = sorted(facts.required_inputs - set(rendered))
    if missing:
        raise ConfigError(f"{model} inputs", missing, f"TensorRT-LLM {target.version} requires them but trtspec "
                          "does not render them", hint="add them to trtspec.triton.contract.SERVED_INPUTS")


def engine_decls(target: TrtllmTarget, dtypes: Mapping[str, str]) -> ModelDecls:
    """The torch flavour's engine models (`tensorrt_llm`, `tensorrt_llm_draft`): the target's tensorrt_llm
    declarations followed by trtspec's EXTENSIONS."""
    core = model_decls(target, "tensorrt_llm", dtypes)
    return ModelDecls(core.inputs + EXTENSIONS.inputs, core.outputs + EXTENSIONS.outputs)


def ensemble(target: TrtllmTarget, models: Mapping[str, ModelDecls], *, dtypes: Mapping[str, str]) -> Ensemble:
    """The ensemble for `target`: its steps are the target's, and a route is kept when both ends are declared
    (`models` maps preprocessing, tensorrt_llm and postprocessing to what is rendered). The same on both flavours."""
    facts = target.model("ensemble")
    steps = _routes(target, facts, models)
    used_in = {v for s in steps for v in s.input_map.values()}
    made_out = {v for s in steps for v in s.output_map.values()}
    inputs = tuple(_decl(t, dtypes, "ensemble") for t in facts.inputs if t.name in used_in)
    outputs = tuple(_decl(t, dtypes, "ensemble") for t in _first_of_each(facts.outputs) if t.name in made_out)
    _check_required(target, "ensemble", facts, {d.name for d in inputs})
    return Ensemble(ModelDecls(inputs, outputs), tuple(steps))


def _routes(target: TrtllmTarget, facts: TritonModel, models: Mapping[str, ModelDecls]) -> list[Step]:
    """The target's ensemble steps, keeping each map entry whose model declares the tensor and whose ensemble tensor
    is fed (an ensemble input, or an earlier step's output) and read (a later step's input, or an ensemble output)."""
    fact_steps = (facts.model_extra or {}).get("ensemble_steps") or []
    if [s.get("model_name") for s in fact_steps] != list(ENSEMBLE_STEPS):
        raise ConfigError("ensemble steps", [s.get("model_name") for s in fact_steps], "are not "
                          f"{list(ENSEMBLE_STEPS)} in the facts of TensorRT-LLM {target.version}",
                          hint="regenerate the data file with scripts/extract_trtllm_facts.py")
    fed = {t.name for t in facts.inputs}
    steps: list[Step] = []
    for raw in fact_steps:
        decls = models[raw["model_name"]]
        inputs = {k: v for k, v in raw["input_map"].items() if k in decls.input_names and v in fed}
        outputs = {k: v for k, v in raw["output_map"].items() if k in decls.output_names}
        fed |= set(outputs.values())
        steps.append(Step(raw["model_name"], inputs, outputs))
    read = {t.name for t in facts.outputs}
    for step in reversed(steps):
        step.output_map = {k: v for k, v in step.output_map.items() if v in read}
        read |= set(step.input_map.values())
    return steps


def check_parameters(target: TrtllmTarget, model: str, keys: Iterable[str]) -> None:
    """Refuse a parameter key that the target's template of `model` does not declare (for tensorrt_llm: nor its C++
    backend read)."""
    facts = target.model(model)
    known = set(facts.parameters)
    if model in ("tensorrt_llm", "tensorrt_llm_draft"):
        known |= target.backend_parameters
    unknown = sorted(set(keys) - known)
    if unknown:
        raise ConfigError(f"{model} parameters", unknown, f"TensorRT-LLM {target.version} does not read them",
                          hint="leave them out for this target, or choose a target that reads them")


def decls_block(decls: ModelDecls) -> dict[str, str]:
    """{"inputs": "input [ ... ]", "outputs": "output [ ... ]"}: the pbtxt text of `decls`."""
    def block(kind: str, items: Sequence[Decl]) -> str:
        body = ",\n".join(f"  {d.pbtxt(kind)}" for d in items)
        return f"{kind} [\n{body}\n]"

    return {"inputs": block("input", decls.inputs), "outputs": block("output", decls.outputs)}


def steps_block(steps: Sequence[Step]) -> str:
    """The `step [ ... ]` entries of ensemble_scheduling."""
    parts = []
    for step in steps:
        lines = [f'      model_name: "{step.model_name}"', "      model_version: -1"]
        lines += [f'      input_map {{ key: "{k}" value: "{v}" }}' for k, v in step.input_map.items()]
        lines += [f'      output_map {{ key: "{k}" value: "{v}" }}' for k, v in step.output_map.items()]
        parts.append("    {\n" + "\n".join(lines) + "\n    }")
    return "step [\n" + ",\n".join(parts) + "\n  ]"


def templates_source(target: TrtllmTarget) -> str:
    """One line that names where the target's Triton templates come from (repository, tag or branch, commit, path)."""
    t = target.templates
    where = t.get("tag") or t.get("branch") or t.get("commit", "")
    commit = t.get("commit")
    line = f"{t['repo']}@{where}" + (f" ({commit[:7]})" if commit and where != commit else "") + f" {t['path']}"
    base = t.get("base")
    if base:
        line += f"; names from {base['repo']}@{base['commit'][:7]}"
    if t.get("pinned") is False:
        line += " (not pinned to the release tag)"
    return line
