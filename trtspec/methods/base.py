"""The declaration every method home makes: `MethodInfo`, what one speculative method means on each execution path.

Torch-free and click-free (build, triton and contracts read it on machines without torch): a proposer is named by a
dotted path the engine imports (`trtspec.spec.proposers.load_proposer`), never imported here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodInfo:
    """What one method means on each execution path (its home module in trtspec/methods/ declares it)."""

    name: str
    summary: str
    # `trtllm-build --speculative_decoding_mode` (engine flow); None = plain engine, no speculative mode.
    trtllm_build_mode: str | None
    # Triton tensorrt_llm model parameter `decoding_mode`; "" lets TensorRT-LLM pick (top_k_top_p / external drafts).
    triton_decoding_mode: str
    # LLM-API `speculative_config.decoding_type` (trtllm-serve / extra_llm_api_options); None = not in the LLM API.
    llmapi_decoding_type: str | None
    # The reference engine's proposer key (one proposer instance per key; eagle3 runs the "eagle" proposer);
    # None = the reference engine has no proposer for it (yet).
    proposer: str | None
    # The proposer class as "module:Class", imported by the engine only (trtspec.spec.proposers.load_proposer).
    proposer_class: str | None = None
    # The EngineConfig field holding this method's typed knobs (eagle_tree, medusa_tree, lookahead, ngram, suffix);
    # None = the method has none. contracts/engine.py sets that part only for its methods.
    engine_part: str | None = None
    needs_draft_model: bool = False
    needs_medusa_heads: bool = False
    needs_eagle_drafter: bool = False
    tree: bool = False
    # Lossless at temperature > 0 on the reference engine (exact rejection sampling).
    lossless_sampling: bool = True
    # The proposer learns from whole requests across the traffic (suffix decoding's cross-request cache).
    cross_request_cache: bool = False
    # Architectures TensorRT-LLM's engine flow supports for this method (HF `architectures[0]`); () = any.
    engine_architectures: tuple[str, ...] = ()
    # trtspec.targets FEATURES a TensorRT-LLM target must have to build and serve this method (engine flow + Triton).
    target_features: tuple[str, ...] = ()
    # Why no supported TensorRT-LLM target can run this method (engine flow, Triton or LLM API); None = it can.
    # `trtspec build` refuses backend tensorrtllm with this reason.
    trtllm_unsupported: str | None = None
    # Plain decoding, the baseline every sweep and report compares against ("none"): no draft, no proposer.
    baseline: bool = False

    @property
    def external_drafts(self) -> bool:
        """A TensorRT-LLM engine takes this method's drafts from the caller (draft_tokens_external), so each request
        says its own k; otherwise the engine's built draft length is the k."""
        return self.trtllm_build_mode == "draft_tokens_external"
