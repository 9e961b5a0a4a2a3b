"""Method `suffix`: suffix decoding with a cross-request cache (reference engine only; docs/suffix.md)."""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

SUFFIX = MethodInfo(
    name="suffix",
    summary="suffix decoding: frequency-scored draft trees from suffix trees over the request and over earlier "
            "requests' outputs (a cross-request cache that learns from the traffic), no draft model",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type=None,
    proposer="suffix",
    proposer_class="trtspec.spec.proposers.suffix:SuffixProposer",
    engine_part="suffix",
    tree=True,
    cross_request_cache=True,
    section="suffix",
    llmapi_unsupported="suffix decoding has no LLM-API decoding type (a suffix-automaton type, SA, came after "
                       "1.2.1)",
    llmapi_nearest=("ngram", "ngram (also draft-model-free: drafts copied from the context)"),
    trtllm_unsupported=(
        "TensorRT-LLM has no suffix decoding in any supported target: trtllm-build has no speculative mode "
        "for it, its LLM API's decoding types (MTP, Medusa, Eagle, Lookahead, NGram, DraftTarget, "
        "UserProvided, AUTO) have none either (UserProvided takes a Python drafter object, which an "
        "extra_llm_api_options file cannot carry), and a draft_tokens_external engine takes chains from the "
        "caller, while the Triton tensorrtllm repository has no model that would keep the cross-request "
        "suffix cache and draft for it"),
)

DECLARES = (SUFFIX,)
