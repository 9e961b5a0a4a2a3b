"""Methods `suffix_draft` and `suffix_eagle3`: hybrid drafting, suffix decoding where the suffix tree's match is strong
and a model drafter elsewhere, chosen per request and per step (SuffixDecoding's hybrid, Oliaro et al. 2024; the
nearest TensorRT-LLM form is the SA enhancer, `sa_config` on an EAGLE-3 / MTP decoding config).

The rule (arctic-inference 0.3.0, `arctic_inference/vllm/model_runner.py`: a suffix draft replaces the model drafter's
when `result.score >= n_predict`): each step the suffix tree drafts first; its draft is taken when it is not empty,
its score (the sum of its tokens' estimated acceptance probabilities, i.e. its expected accepted length) is at least
`hybrid.min_score` (unset: the model drafter's k this step, arctic-inference's rule) and its context match is at
least `hybrid.min_match_len` tokens (TensorRT-LLM's `SAEnhancerConfig.threshold`; unset: any); otherwise the model
drafter drafts at most `hybrid.drafter_k` tokens (unset: 4; the request's k bounds the suffix tree's draft). Both
proposers see every committed token of every request, so either is ready at any step. Each draft is verified as its own proposer's would be (one-hot suffix drafts, sampled
draft-model drafts with their probabilities), so the method is as lossless as its parts at any temperature.

Two methods, not one with a `drafter:` option: what a method needs (a draft model or an EAGLE-3 drafter), its
checkpoint, its sweep variants and its TensorRT-LLM form are fields of its `MethodInfo`, read as data by the CLI,
the build plan, the engine and the sweep; a drafter chosen by an option would make each of them a function of it.
"""

from __future__ import annotations

from trtspec.methods.base import FlagRow, MethodInfo
from trtspec.methods.draft_target import DRAFT_RUNTIME_FLAG
from trtspec.methods.eagle import EagleSpec

# one row, shared by both hybrids: each NAME=VALUE sets the engine parameter hybrid_NAME (contracts.engine.Hybrid)
HYBRID_FLAG = FlagRow("--hybrid", "hybrid_", "name_value", "Methods suffix_draft / suffix_eagle3: one hybrid option "
                      "NAME=VALUE (repeatable): min_score (the suffix draft's score it needs; default the model "
                      "drafter's k), min_match_len, drafter_k (the model drafter's k; default 4).",
                      deploy="torch flavour; over the build's.")
SA_ON_DRAFTERS = "TensorRT-LLM's SA enhancer (sa_config, 1.3 line) rides on the EAGLE-3, MTP and PARD decoding configs"
# why suffix_eagle3 has no TensorRT-LLM form yet, though 1.3.0rc29's Eagle3DecodingConfig has sa_config
SA_GAP = ("TensorRT-LLM's SA enhancer (sa_config on Eagle3DecodingConfig, 1.3 line) chooses by match length alone "
          "(threshold) from suffix automata of the running requests, while this hybrid chooses by the suffix tree's "
          "score over finished outputs too, and trtspec does not render sa_config yet")

SUFFIX_DRAFT = MethodInfo(
    name="suffix_draft",
    summary="hybrid: suffix decoding's draft where its match is strong (score >= the draft model's k), a draft "
            "model's elsewhere, per request and per step",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type=None,
    proposer="suffix_draft",
    proposer_class="trtspec.spec.proposers.hybrid:SuffixDraftProposer",
    engine_part="hybrid",
    engine_part_class="trtspec.contracts.engine_parts:Hybrid",
    reads_parts=("suffix",),
    checkpoint="draft",
    checkpoint_example="tiny-draft",
    needs_draft_model=True,
    tree=True,
    cross_request_cache=True,
    trtllm_unsupported=f"{SA_ON_DRAFTERS}, not on DraftTarget; use method draft_target or suffix, or backend: torch",
    llmapi_unsupported=f"{SA_ON_DRAFTERS}, not on DraftTarget",
    llmapi_nearest=("draft_target", "draft_target (the draft model alone), or suffix (SA alone)"),
    llmapi_hint="use backend: torch (the reference engine runs the hybrid)",
    flags=(DRAFT_RUNTIME_FLAG, HYBRID_FLAG),
)

SUFFIX_EAGLE3 = MethodInfo(
    name="suffix_eagle3",
    summary="hybrid: suffix decoding's draft where its match is strong (score >= EAGLE-3's k), an EAGLE-3 "
            "drafter's elsewhere, per request and per step",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type=None,
    proposer="suffix_eagle3",
    proposer_class="trtspec.spec.proposers.hybrid:SuffixEagleProposer",
    engine_part="hybrid",
    engine_part_class="trtspec.contracts.engine_parts:Hybrid",
    reads_parts=("suffix", "eagle_tree"),
    checkpoint="eagle",
    checkpoint_example="tiny-eagle",
    needs_eagle_drafter=True,
    tree=True,
    cross_request_cache=True,
    section="eagle",  # the drafter and its tree, as for eagle3 (eagle.model, eagle.topk / depth / choices)
    section_model="model",
    options=EagleSpec,
    engine_architectures=("LlamaForCausalLM",),
    trtllm_unsupported=f"{SA_GAP}; use method eagle3 or suffix, or backend: torch",
    llmapi_unsupported=SA_GAP,
    llmapi_nearest=("eagle3", "eagle with eagle.eagle3: true (EAGLE-3 alone), or suffix (SA alone)"),
    llmapi_hint="use backend: torch (the reference engine runs the hybrid)",
    flags=(HYBRID_FLAG,),
)

DECLARES = (SUFFIX_DRAFT, SUFFIX_EAGLE3)
