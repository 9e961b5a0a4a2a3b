"""Method `suffix`: suffix decoding with a cross-request cache (docs/suffix.md).

The reference engine runs arctic-inference's suffix trees. TensorRT-LLM's nearest form is SA (`SADecodingConfig`,
standalone suffix-automaton speculation, PyTorch backend only), which 1.3.0rc29 has and 1.2.1 lacks
(targets/pytorch-workflow.json): `sa_form` translates the options that mean the same there and refuses, by name,
those SA has no counterpart for unless their value makes the behaviour the same (then they are dropped with a note).
docs/suffix.md, "TensorRT-LLM's SA", has the table and the sources.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError
from trtspec.methods.base import MethodInfo

SUFFIX = MethodInfo(
    name="suffix",
    summary="suffix decoding: frequency-scored draft trees from suffix trees over the request and over earlier "
            "requests' outputs (a cross-request cache that learns from the traffic), no draft model",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type="SA",  # TensorRT-LLM's suffix automaton (1.3 line): the facts decide which release has it
    proposer="suffix",
    proposer_class="trtspec.spec.proposers.suffix:SuffixProposer",
    engine_part="suffix",
    tree=True,
    cross_request_cache=True,
    section="suffix",
    llmapi_nearest=("ngram", "ngram (also draft-model-free: drafts copied from the context)"),
    llmapi_hint="SA exists from 1.3: render for Dynamo with `trtspec k8s CONFIG` (Dynamo 1.6.1 runs TensorRT-LLM "
                "1.3.0rc29, whose SA this build maps to), or use backend: torch (the reference engine runs suffix "
                "decoding itself)",
    engine_flow_unsupported=(
        "trtllm-build has no speculative mode for suffix decoding, and a draft_tokens_external engine takes chains "
        "from the caller while the Triton tensorrtllm repository has no model that would keep the cross-request "
        "suffix cache and draft for it; the LLM API's SA decoding type (TensorRT-LLM 1.3) is the nearest form"),
)

DECLARES = (SUFFIX,)

@dataclass(frozen=True)
class SaForm:
    """The SA keys of a suffix build (besides decoding_type and max_draft_len) and what the plan says about them."""

    fields: dict[str, Any]
    notes: tuple[str, ...]


def sa_form(options: SuffixConfig | None, *, max_draft_len: int, max_batch_size: int, version: str,
            fields: Collection[str], limits: Mapping[str, Any] | None = None) -> SaForm:
    """`options` (None: the defaults) as TensorRT-LLM `version`'s SA keys (`fields`: the keys its SADecodingConfig
    reads; `limits`: its global pool's limits from the release's facts, pytorch-workflow.json SADecodingConfig
    `limits.global_pool`: match_max tokens matched, slots_max requests held; None: none known). Mapped:
    max_tree_depth -> max_matching_ngram_size (the longest context suffix matched), max_cached_requests
    -> enable_global_pool and global_pool_size (N finished requests kept + max_batch_size running ones; 0: no pool).
    SA has no counterpart for tree, min_token_prob, max_spec_factor / max_spec_offset: each is dropped with a note
    where its value makes the behaviour SA's (a chain; nothing pruned; a cap that never binds), else a ConfigError
    (exit 2) naming `suffix.<option>`, the release and the value that maps."""
    config = (options or SuffixConfig()).validate()
    default = SuffixConfig()
    sa = f"TensorRT-LLM {version}'s SA"
    torch = "or serve suffix decoding with backend: torch (the reference engine runs arctic-inference's trees)"

    def refuse(name: str, problem: str, fix: str) -> ConfigError:
        value = getattr(config, name)
        text = str(value).lower() if isinstance(value, bool) else value
        shown = f"{text} (the default)" if value == getattr(default, name) else text
        return ConfigError(f"suffix.{name}", shown, f"{sa} has no counterpart: {problem}", hint=f"{fix}, {torch}")

    # options SA has no counterpart for: the same behaviour, or refused
    if config.tree:
        raise refuse("tree", "arctic-inference drafts frequency-ordered token trees, SA one chain of max_draft_len "
                     "tokens", "set suffix.tree: false (one path, a chain as SA drafts)")
    if config.min_token_prob > 0:
        raise refuse("min_token_prob", "arctic-inference leaves out draft tokens whose frequency share is below it, "
                     "SA scores no frequencies and prunes nothing", "set suffix.min_token_prob: 0 (nothing pruned)")
    if config.max_spec_factor + config.max_spec_offset < max_draft_len:
        raise refuse("max_spec_offset", f"with max_spec_factor {config.max_spec_factor} a match of m tokens drafts "
                     f"at most {config.max_spec_factor} x m + {config.max_spec_offset} tokens, while SA drafts "
                     f"max_draft_len ({max_draft_len}) tokens after any match",
                     f"set suffix.max_spec_offset: {max_draft_len} (the cap never binds, as in SA)")
    dropped = ["suffix.tree false (SA drafts one chain)", "suffix.min_token_prob 0 (SA prunes nothing)",
               f"suffix.max_spec_factor {config.max_spec_factor} + max_spec_offset {config.max_spec_offset} >= "
               f"max_draft_len {max_draft_len} (the cap never binds; SA drafts max_draft_len after any match)"]
    # options that mean the same
    out: dict[str, Any] = {}
    mapped = []
    pool = config.max_cached_requests > 0
    for key in ("max_matching_ngram_size", "enable_global_pool") + (("global_pool_size",) if pool else ()):
        if key not in fields:
            name = "max_tree_depth" if key == "max_matching_ngram_size" else "max_cached_requests"
            raise refuse(name, f"its SADecodingConfig has no {key}", "use a release whose SA has it")
    pool_limits = (limits or {}).get("global_pool", {})
    match_max, slots_max = pool_limits.get("match_max"), pool_limits.get("slots_max")
    if pool and match_max is not None and config.max_tree_depth > match_max:
        raise refuse("max_tree_depth", f"with the global pool (max_cached_requests > 0) SA matches at most "
                     f"{match_max} tokens (max_matching_ngram_size -1 or 1..{match_max})",
                     f"set suffix.max_tree_depth <= {match_max}, or max_cached_requests: 0")
    out["max_matching_ngram_size"] = config.max_tree_depth
    mapped.append(f"max_tree_depth {config.max_tree_depth} -> max_matching_ngram_size {config.max_tree_depth} (the "
                  "longest context suffix matched)")
    out["enable_global_pool"] = pool
    if pool:
        slots = config.max_cached_requests + max_batch_size
        if slots_max is not None and slots > slots_max:
            raise refuse("max_cached_requests", f"SA's global pool holds at most {slots_max} requests, running "
                         f"ones included ({config.max_cached_requests} + max_batch_size {max_batch_size} = {slots})",
                         f"set suffix.max_cached_requests <= {slots_max - max_batch_size}")
        out["global_pool_size"] = slots
        mapped.append(f"max_cached_requests {config.max_cached_requests} -> enable_global_pool true, global_pool_size "
                      f"{slots} ({config.max_cached_requests} finished + max_batch_size {max_batch_size} running)")
    else:
        mapped.append("max_cached_requests 0 -> enable_global_pool false (no cross-request drafting)")
    return SaForm(out, (f"suffix -> {sa}: " + "; ".join(mapped),
                        "dropped (SA behaves the same): " + "; ".join(dropped)))
