"""The declaration every method home makes: `MethodInfo`, what one speculative method means on each execution path.

Torch-free and click-free (build, triton and contracts read it on machines without torch): a proposer is named by a
dotted path the engine imports (`trtspec.spec.proposers.load_proposer`), never imported here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlagRow:
    """One command-line flag of a method's engine parameter, as data: cli/_engine.py makes the click option of every
    registered home's rows at each use (`trtspec serve`, `deploy`, `generate`), so a method's flags come with its home.

    `kind` is "text" (a string), "int" (an integer within `bounds`) or "name_value" (NAME=VALUE, repeatable: each
    sets the parameter `field` + NAME, so `field` is a prefix such as "suffix_")."""

    flag: str  # "--eagle-topk"
    field: str  # the EngineConfig parameter it sets (contracts.engine.EngineConfig.to_parameters' flat names)
    kind: str
    help: str
    metavar: str | None = None
    bounds: tuple[int, int] | None = None  # kind "int": the smallest and largest value (shown in --help)
    # It names the method's checkpoint: listed after the target's --model; else after --device with the methods' knobs.
    checkpoint: bool = False
    # `trtspec deploy` takes it over the build's engine configuration, with this note after its help; None = deploy
    # does not take it (the build decides).
    deploy: str | None = None

    @property
    def multiple(self) -> bool:
        return self.kind == "name_value"


FLAG_KINDS = ("text", "int", "name_value")  # FlagRow.kind


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
    # The engine part's class as "module:Class" (trtspec.contracts.engine_parts: EagleTree, MedusaTree, Lookahead,
    # Ngram, Hybrid, SuffixPart): how EngineConfig writes and reads that field; set with engine_part.
    engine_part_class: str | None = None
    # Further EngineConfig parts it reads besides `engine_part` (a hybrid: suffix's options and its drafter's tree);
    # contracts/engine.py lets them be set for it too.
    reads_parts: tuple[str, ...] = ()
    # The EngineConfig field naming the checkpoint the method needs (draft, medusa, eagle), with an embedded example
    # for an error's hint; None = it needs none.
    checkpoint: str | None = None
    checkpoint_example: str | None = None
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
    # Jacobi lookahead: configured by (W, N, G), and k counts the nodes of its n-gram trie.
    jacobi: bool = False
    # The build config's section of this method's options (`medusa:`, `eagle:`, ...); None = it has none.
    section: str | None = None
    # The key of `section` that names the method's checkpoint (medusa.heads, eagle.model, redrafter.drafter); a
    # method with one needs its section.
    section_model: str | None = None
    # The class of `section`, declared in the home beside this (MedusaSpec, EagleSpec, ...: a pydantic model, or a
    # dataclass read by its `from_options`, as suffix's SuffixConfig): config.BuildSpec's field `section` holds one,
    # and BuildSpec.options returns it for the method a config builds. None = the method has no section.
    options: type | None = None
    # The method name build configs use for it (eagle3 -> eagle with eagle.eagle3: true); None = its own name.
    build_as: str | None = None
    # The method the reference engine runs for a build of this one with a drafter of the newer generation
    # (eagle -> eagle3 when eagle.eagle3: true); None = the build's method itself.
    reference_form: str | None = None
    # build.preflight's rule for max_draft_len (DRAFT_LEN_RULES): plain, external, heads, layers, window, beams,
    # own_layers (the target's own draft layers, target_layers_key).
    draft_len_rule: str = "external"
    # Why the LLM API's PyTorch backend has no decoding type for it in any target (a refusal names it); None = the
    # facts decide (llmapi_decoding_type).
    llmapi_unsupported: str | None = None
    # The nearest method with a PyTorch decoding type, and how to say it, for a refusal; None = none named.
    llmapi_nearest: tuple[str, str] | None = None
    # What to do where a target's LLM API lacks the method's decoding type but a later release has it (suffix: SA from
    # 1.3, rendered for Dynamo by `trtspec k8s`); None = the generic hint (the nearest method, or the engine flow).
    llmapi_hint: str | None = None
    # The target's trtllm-build takes --max_draft_len (Medusa and ReDrafter derive it from the checkpoint, 2.2).
    build_max_draft_len: bool = False
    # Its engines need paged context FMHA: without it TensorRT-LLM silently turns KV-cache reuse off.
    needs_paged_context_fmha: bool = False
    # Features the Triton tensorrtllm repository needs besides target_features (draft_target: the BLS's draft loop).
    repository_features: tuple[str, ...] = ()
    # Why a served inflight-batcher model's k cannot change for it (trtspec control); None = it can, or it has no k.
    inflight_k_fixed: str | None = None
    # Why TensorRT-LLM's engine flow (trtllm-build) cannot build it: `workflow: engine` is refused with this reason
    # (a form of the LLM API's PyTorch backend only, e.g. MTP); None = the facts decide.
    engine_flow_unsupported: str | None = None
    # Why the reference (torch) engine cannot serve it honestly: `backend: torch` and the engine host refuse it with
    # this reason; None = it runs it, or the generic "no proposer" refusal applies.
    reference_unsupported: str | None = None
    # The target config.json key that declares the layers the method drafts with (MTP: num_nextn_predict_layers):
    # the target must declare more than 0; None = the method needs no layers of the target's own.
    target_layers_key: str | None = None
    # Its command-line flags (FlagRow), in --help order; () = none. The engine flags of every command list each
    # registered home's rows in table order.
    flags: tuple[FlagRow, ...] = ()
    # The sweep's name for its variants: the grid's variant key and the case and record field naming one (draft,
    # medusa, eagle, lookahead, max_ngram, suffix_cache), also the SweepSpec field listing them (but draft_target's
    # `drafts`); None = the method has no variants beyond k.
    sweep_variant: str | None = None
    # `trtspec train <command>` that trains its drafter (eagle3: eagle), and the ModelOpt speculative mode the trainer
    # converts the target with (`modelopt.torch.speculative.convert(model, [(mode, config)])`); None = none.
    train_command: str | None = None
    modelopt_mode: str | None = None
    # The target facts' examples.dirs key of TensorRT-LLM's examples directory holding the method's
    # convert_checkpoint.py (engine flow); None = the target family's own converter.
    examples_dir: str | None = None

    def proposer_key(self) -> str:
        """`proposer`, for a method the reference engine runs: the name its proposer class gives itself."""
        if self.proposer is None:
            raise ValueError(f"method {self.name} has no reference-engine proposer")
        return self.proposer

    @property
    def external_drafts(self) -> bool:
        """A TensorRT-LLM engine takes this method's drafts from the caller (draft_tokens_external), so each request
        says its own k; otherwise the engine's built draft length is the k."""
        return self.trtllm_build_mode == "draft_tokens_external"
