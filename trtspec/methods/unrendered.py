"""The LLM-API decoding types and `speculative_config` options of TensorRT-LLM that trtspec does not render, and the
one-line refusal (ConfigError, exit 2) a build config that names one gets, per target: the field, the target, why
(the target's facts in pytorch-workflow.json: the class it lacks, or what the class needs that a build config cannot
give honestly) and the nearest valid choice trtspec has.

Not a method home: nothing here is registered, drafts or renders. A build config names these as `method: pard` (any
spelling of a decoding type: PARD, AUTO, User_Provided, SaveState, DFlash, DSpark) or as `llm_api.<option>`
(allow_advanced_sampling, use_rejection_sampling); BuildSpec refuses them before its own field checks, so the user
reads the reason instead of "unknown method". docs/targets.md, "Decoding types trtspec does not render", gives each
decision with its sources. Torch-free; reads the facts through targets.llm_api only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trtspec.errors import ConfigError
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.methods.ngram import NGRAM
from trtspec.methods.none import NONE
from trtspec.targets.llm_api import LlmApiFacts, facts_versions, llm_api_facts


@dataclass(frozen=True)
class UnrenderedType:
    """A decoding type trtspec has no home for: the spellings a build config's `method:` may use for it (compared
    lowercase without '_' / '-'), its class in the facts, why trtspec does not render it and the nearest valid
    choice (`nearest(facts, max_batch_size)`: a release-specific suggestion, e.g. AUTO's NGram)."""

    spellings: tuple[str, ...]
    class_name: str
    why: str
    nearest: Callable[[LlmApiFacts, int], str]


def _auto_nearest(facts: LlmApiFacts, max_batch_size: int) -> str:
    """The NGram AUTO runs on `facts`' release at `max_batch_size` (AutoDecodingConfig.picks), as a build config."""
    picks = facts.raw.get("classes", {}).get("AutoDecodingConfig", {}).get("picks")
    if not picks:
        return f"method: {NGRAM.name} (draft-model-free, as AUTO is)"
    from trtspec.targets.controls import has_release, release

    row = next(r for r in picks["by_max_batch_size"]
               if r["max_batch_size_at_most"] is None or max_batch_size <= r["max_batch_size_at_most"])
    ngram = f"method: {NGRAM.name} with max_draft_len: {row['max_draft_len']}, ngram.max_matching_ngram_size: " \
            f"{row['max_matching_ngram_size']}"
    # AUTO's max_concurrency, where trtspec knows how the release's NGram reads it (targets/controls.json)
    tag = release(facts.version).tag(picks["decoding_type"]) if has_release(facts.version) else None
    if tag is None or release(facts.version).applies(tag) is True:
        return f"{ngram}, llm_api.max_concurrency: {picks['max_concurrency']} (the NGram AUTO runs at " \
               f"engine.max_batch_size {max_batch_size})"
    return f"{ngram} (the NGram AUTO runs at engine.max_batch_size {max_batch_size}, which AUTO also turns off above " \
           f"{picks['max_concurrency']} concurrent requests: no fact says how {facts.version}'s NGram reads " \
           "max_concurrency, so trtspec does not write it)"


def _fixed(text: str) -> Callable[[LlmApiFacts, int], str]:
    return lambda facts, max_batch_size: text


UNRENDERED_TYPES: tuple[UnrenderedType, ...] = (
    UnrenderedType(("pard",), "PARDDecodingConfig",
                   "PARD drafts with a PARD model (trained for parallel drafting with a mask token), which trtspec "
                   "neither ships nor can tell from an autoregressive draft in its config.json",
                   _fixed(f"method: {DRAFT_TARGET.name} (an autoregressive draft model)")),
    UnrenderedType(("auto",), "AutoDecodingConfig",
                   "AUTO ignores every field of its config (max_draft_len included) and runs an NGram the release "
                   "picks from max_batch_size, so the build's k would not be the served one; trtspec writes that "
                   "NGram itself",
                   _auto_nearest),
    UnrenderedType(("userprovided",), "UserProvidedDecodingConfig",
                   "it needs a Python Drafter object (drafter, resource_manager), which an extra_llm_api_options YAML "
                   "file cannot carry",
                   _fixed(f"method: {NGRAM.name} or {DRAFT_TARGET.name} (drafters a YAML file names), or backend: "
                          "torch with your own proposer (trtspec.methods.register)")),
    UnrenderedType(("savestate", "savehiddenstates"), "SaveHiddenStatesDecodingConfig",
                   "it dumps the target's hidden states to files at max_batch_size 1 (data collection, no drafts)",
                   _fixed(f"method: {NONE.name} to serve; `trtspec train eagle` computes the target's hidden "
                          "states itself")),
    UnrenderedType(("dflash",), "DFlashDecodingConfig",
                   "it drafts with a DFlash model (a parallel draft reading target hidden states), which trtspec "
                   "neither ships nor checks",
                   _fixed(f"method: eagle with eagle.eagle3: true (an EAGLE-3 drafter), or {DRAFT_TARGET.name}")),
    UnrenderedType(("dspark",), "DSparkDecodingConfig",
                   "it drafts with a DSpark model (DeepSeek's semi-parallel draft reading target hidden states), which "
                   "trtspec neither ships nor checks",
                   _fixed(f"method: eagle with eagle.eagle3: true (an EAGLE-3 drafter), or {DRAFT_TARGET.name}")),
)


def _spelling(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def unrendered_type(method: str) -> UnrenderedType | None:
    """The table row a build config's `method:` names (any spelling of the decoding type), or None."""
    key = _spelling(method)
    return next((row for row in UNRENDERED_TYPES if key in row.spellings), None)


def _facts(version: str) -> LlmApiFacts | None:
    return llm_api_facts(version) if version in facts_versions() else None


def type_refusal(method: str, version: str, *, max_batch_size: int = 1) -> ConfigError | None:
    """The refusal of `method: <decoding type>` on TensorRT-LLM `version` (None: `method` names no such type)."""
    row = unrendered_type(method)
    if row is None:
        return None
    facts = _facts(version)
    if facts is None:
        return ConfigError("method", method, f"is a TensorRT-LLM LLM-API decoding type ({row.class_name}) trtspec "
                           f"does not render, and trtspec has no LLM-API facts for TensorRT-LLM {version}",
                           hint=f"nearest: {row.nearest(llm_api_facts(facts_versions()[-1]), max_batch_size)}")
    tag = next((t for t, d in facts.decoding_types.items() if d.class_name == row.class_name), None)
    if tag is None:  # the release lacks the class: the facts' own words
        why = next((f"{t}: {w}" for t, w in facts.invalid_decoding_types.items() if _spelling(t) in row.spellings),
                   "not among the decoding types of its facts")
        problem = f"TensorRT-LLM {version} has no {row.class_name} ({why})"
        others = [v for v in facts_versions() if any(d.class_name == row.class_name
                                                     for d in llm_api_facts(v).decoding_types.values())]
        if others:
            problem += f"; {', '.join(others)} has it, and trtspec does not render it there either: {row.why}"
    else:
        problem = f"TensorRT-LLM {version}'s decoding type {tag} is not rendered by trtspec: {row.why}"
    return ConfigError("method", method, problem, hint=f"nearest: {row.nearest(facts, max_batch_size)}")


# --- speculative_config options: llm_api.<option> ----------------------------------------------------------------

# trtspec's decision per option, by what the release's facts say of the field (absent, deprecated, or present)
UNRENDERED_OPTIONS: Mapping[str, Mapping[str, str]] = {
    "allow_advanced_sampling": {
        "present": "its declaration at this release was not read (the facts rest on secondary evidence) nor what "
                   "one-model paths sample with it, and trtspec writes no switch whose behaviour it cannot state",
        "nearest": "leave it unset (one-model paths then decode greedily); eagle.one_model: false samples on the "
                   "two-model path without it; backend: torch serves exact rejection sampling",
        "deprecated": "drop it (non-greedy sampling is detected per request)",
    },
    "use_rejection_sampling": {
        "present": "prototype: which one-model paths take it at this release candidate and whether its acceptance "
                   "is exact were not read at the tag (stored versions bracket it; off the dynamic tree it needs "
                   "FlashInfer), and trtspec's parity checks cover greedy decoding only",
        "nearest": "leave it unset (exact-match verification); backend: torch serves exact rejection sampling",
        "deprecated": "drop it",
    },
}


def option_refusal(options: Mapping[str, Any], version: str) -> ConfigError | None:
    """The refusal of the first `llm_api.<option>` in `options` that trtspec does not render on `version` (None:
    none is set)."""
    name = next((key for key in UNRENDERED_OPTIONS if key in options), None)
    if name is None:
        return None
    decision = UNRENDERED_OPTIONS[name]
    facts = _facts(version)
    fact = next((f for f in facts.raw["base"]["fields"] if f["name"] == name), None) if facts is not None else None
    field = f"llm_api.{name}"
    if fact is None:
        others = [v for v in facts_versions() if name in {f.name for f in llm_api_facts(v).base_fields}]
        where = f" (a field of {', '.join(others)} only, which trtspec does not write either: " \
                f"{decision['present']})" if others else ""
        return ConfigError(field, options[name], f"is not a speculative_config field of TensorRT-LLM {version}{where}",
                           hint=f"drop {field}; {decision['nearest']}")
    if fact.get("status") == "deprecated":
        return ConfigError(field, options[name], f"is a deprecated no-op in TensorRT-LLM {version}",
                           hint=f"{decision['deprecated']}")
    return ConfigError(field, options[name], f"TensorRT-LLM {version} has it, trtspec does not write it: "
                       f"{decision['present']}", hint=f"nearest: {decision['nearest']}")
