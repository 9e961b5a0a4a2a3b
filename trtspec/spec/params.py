"""Per-request parameters: SamplingParams (what distribution to sample) and SpecParams (how to speculate).

Both are frozen dataclasses with `validate()`, which raises ConfigError naming the field, the value and the fix.
The engine validates every request before generating anything, so bad input never yields partial output.
`trtllm_sampling_params` turns the request controls of NVIDIA's TensorRT-LLM clients (unset ones included) into a
SamplingParams with TensorRT-LLM's meaning; the served `tensorrt_llm` model uses it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trtspec.errors import ConfigError
from trtspec.methods import DEFAULT_METHOD

TokenSequences = tuple[tuple[int, ...], ...]


def is_greedy(temperature: float, top_k: int = 0) -> bool:
    """Argmax decoding: temperature 0, or top-k 1 (TensorRT-LLM's greedy is top_k=1 at any temperature)."""
    return temperature == 0 or top_k == 1


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy (so is top_k=1, TensorRT-LLM's way of asking for greedy)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off; must be in (0, 1]
    seed: int | None = None  # per-request torch.Generator seed; None = fresh OS entropy
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()  # in addition to the model's EOS (unless ignore_eos)
    ignore_eos: bool = False
    # Logits processors (spec/logits_process.py, TensorRT-LLM's definitions). Applied to the target distribution at
    # every verified position with that position's own context (prompt + output + draft prefix): speculation is exact.
    repetition_penalty: float = 1.0  # > 0, 1 = off; a seen token's logit z becomes z * rp if z < 0 else z / rp
    presence_penalty: float = 0.0  # 0 = off; subtracted once from the logit of every seen token
    frequency_penalty: float = 0.0  # 0 = off; subtracted once per occurrence (seen = in prompt + output)
    min_tokens: int = 0  # the stop tokens (EOS, stop_token_ids) are banned until the output has this many tokens
    bad_words: TokenSequences = ()  # token sequences never generated (the last token is banned after the rest)
    stop_words: TokenSequences = ()  # token sequences that end the request; the sequence stays in the output
    # Outputs: per-token log-probabilities of the emitted tokens and their running sum (RequestDelta.log_probs,
    # cum_log_probs). The distribution is the processed one before top-k/top-p (spec/logits_process.py).
    return_log_probs: bool = False
    normalize_log_probs: bool = False  # TensorRT-LLM's normalize_log_probs: renormalise over the top-k set

    def __post_init__(self) -> None:
        # accept lists for the sequence fields; store hashable tuples
        for name in ("bad_words", "stop_words"):
            object.__setattr__(self, name, _token_sequences(getattr(self, name)))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        """Argmax decoding: temperature 0, or top_k 1 (then temperature still shapes the reported log-probs)."""
        return is_greedy(self.temperature, self.top_k)

    @property
    def has_logits_processors(self) -> bool:
        """Any control whose effect depends on the context (False keeps the engine's fast path)."""
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.min_tokens > 0 or bool(self.bad_words))

    def validate(self) -> SamplingParams:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError("temperature", self.temperature, "must be a finite number >= 0",
                              hint="use 0 for greedy, e.g. 0.8 to sample")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p", self.top_p, "must be in (0, 1]", hint="use 1.0 to disable nucleus sampling")
        if self.top_k < 0:
            raise ConfigError("top_k", self.top_k, "must be >= 0", hint="use 0 to disable top-k")
        if self.max_new_tokens < 1:
            raise ConfigError("max_new_tokens", self.max_new_tokens, "must be >= 1", hint="e.g. 128")
        if not (self.repetition_penalty > 0 and math.isfinite(self.repetition_penalty)):
            raise ConfigError("repetition_penalty", self.repetition_penalty, "must be a finite number > 0",
                              hint="use 1.0 to disable it, > 1 to discourage repetition")
        for name in ("presence_penalty", "frequency_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(name, getattr(self, name), "must be a finite number",
                                  hint="use 0 to disable it, > 0 to discourage repetition")
        if self.min_tokens < 0:
            raise ConfigError("min_tokens", self.min_tokens, "must be >= 0", hint="use 0 to disable it")
        for name in ("bad_words", "stop_words"):
            for word in getattr(self, name):
                if not word or any(t < 0 for t in word):
                    raise ConfigError(name, word, "each sequence needs at least one token id >= 0",
                                      hint=f"e.g. {name}=[[13, 7], [42]]")
        if any(t < 0 for t in self.stop_token_ids):
            raise ConfigError("stop_token_ids", self.stop_token_ids, "token ids must be >= 0")
        return self


@dataclass(frozen=True)
class SpecParams:
    method: str = DEFAULT_METHOD  # one of trtspec.methods.engine_methods()
    # draft tokens per step (tree methods: nodes of the tree kept); 0 = plain decoding whatever the method;
    # with adaptive: the largest k
    k: int = 4
    adaptive: bool = False  # choose k in [0, k] every step from acceptance and step costs (spec/adaptive.py)
    # Tree drafts at temperature > 0: "exact" (recursive rejection sampling, lossless) or "typical_lossy" (Medusa's
    # typical acceptance: accepts more, but does NOT preserve the target distribution).
    acceptance: str = "exact"
    # The caller's own draft (TensorRT-LLM's `draft_input_ids` on a draft_tokens_external engine): the target verifies
    # it in the request's first step (proposers/external.py), then `method` drafts (method "none": plain decoding).
    draft_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "draft_token_ids", tuple(int(t) for t in self.draft_token_ids))

    def validate(self, *, max_k: int, available: tuple[str, ...] | None = None) -> SpecParams:
        """Check k against the engine's max_k and the method against the methods this engine can run.

        Args:
            available: methods the engine has the parts for (e.g. no draft_target without a draft model).
        """
        from trtspec.methods import engine_methods, resolve

        info = resolve(self.method)
        if self.method not in engine_methods():
            raise ConfigError("method", self.method, "the reference engine has no proposer for it",
                              hint=f"use one of: {', '.join(engine_methods())}")
        if available is not None and self.method not in available:
            need = ("a draft model (draft=...)" if info.needs_draft_model else "an EAGLE-3 drafter (eagle=...)"
                    if info.needs_eagle_drafter else "Medusa heads (medusa=...)")
            raise ConfigError("method", self.method, f"needs {need}, which this engine was not loaded with",
                              hint=f"load the engine with it, or use one of: {', '.join(available)}")
        if self.acceptance not in ("exact", "typical_lossy"):
            raise ConfigError("acceptance", self.acceptance, "is not an acceptance rule",
                              hint="use exact (lossless) or typical_lossy (Medusa typical acceptance, lossy)")
        if self.acceptance != "exact" and not info.tree:
            raise ConfigError("acceptance", self.acceptance, f"applies to tree methods only, not {self.method}",
                              hint="use acceptance=exact, or method=medusa")
        if not 0 <= self.k <= max_k:
            raise ConfigError("k", self.k, f"must be in [0, {max_k}] (the engine's max_k)",
                              hint=f"use k <= {max_k}, or load the engine with a larger max_k")
        if len(self.draft_token_ids) > max_k:
            raise ConfigError("draft_token_ids", f"{len(self.draft_token_ids)} tokens",
                              f"more than the engine's max_k={max_k} (TensorRT-LLM: max_draft_len)",
                              hint=f"send at most {max_k} draft tokens, or load the engine with a larger max_k")
        if any(t < 0 for t in self.draft_token_ids):
            raise ConfigError("draft_token_ids", self.draft_token_ids, "token ids must be >= 0")
        return self


def trtllm_sampling_params(*, max_new_tokens: int, temperature: float | None = None, top_k: int | None = None,
                           top_p: float | None = None, seed: int | None = None, end_id: int | None = None,
                           min_tokens: int | None = None, repetition_penalty: float | None = None,
                           presence_penalty: float | None = None, frequency_penalty: float | None = None,
                           stop_words: Iterable[Sequence[int]] = (), bad_words: Iterable[Sequence[int]] = (),
                           return_log_probs: bool = False, normalize_log_probs: bool = True) -> SamplingParams:
    """SamplingParams meaning what a TensorRT-LLM request with these controls means (None = the client left it unset).

    TensorRT-LLM semantics (v0.19.0; the engine flow's C++ sampler, unchanged through 1.2.x):
    - temperature unset: 1.0; repetition_penalty 1.0; presence/frequency_penalty 0.0; seed 0: an unseeded request is
      seeded with 0, not random (cpp/tensorrt_llm/layers/defaultDecodingParams.h, NVIDIA/TensorRT-LLM@1020a8d7).
    - runtime_top_p <= 0 counts as unset (tensorrtllm_backend v0.19.0 inflight_batcher_llm/src/utils.cc
      `getSamplingConfigFromTensors`); unset top_k and top_p are 0, and then (kernels/samplingTopKKernels.cu
      `setupTopKRuntimeArgs`, NVIDIA/TensorRT-LLM@03961722): k == 0 and p == 0 -> k = 1 (greedy); k > 0 and p == 0
      -> p = 1.0; k == 0 and p > 0 -> top-p sampling alone. Greedy stays top_k=1 at the request's temperature, which
      still shapes the reported log-probs.
    - end_id: the only token that ends a request; none given -> endId -1, generation runs to request_output_len
      (batch_manager: `llmReq->mEndId.value_or(-1)`). So the model's EOS is ignored and end_id is the stop token.
      TensorRT-LLM does not count an end_id it sampled in the sequence length; this engine keeps it as the last
      output token (finish_reason "stop"): a server that mirrors TensorRT-LLM drops it.
    - min_tokens (Triton input `min_length` up to v0.19.0) unset: 0 here. TensorRT-LLM's default is 1, applied only
      when some request in the batch sets another value (layers/penaltyLayer.cpp), i.e. batch-dependent; 0 is the
      batch-independent reading.
    - normalize_log_probs: the served model's `normalize_log_probs` parameter; tensorrtllm_backend v0.19.0
      model_instance_state.cc sets it to true when the parameter is unset (the executor's own default is false).
    - temperature 0: TensorRT-LLM multiplies logits by 1 / (0 + 1e-6), i.e. greedy, with log-probs ~0 and additive
      penalties negligible; here 0 is greedy over the unscaled processed logits (documented deviation).
    """
    t = 1.0 if temperature is None else float(temperature)
    k = 0 if top_k is None else int(top_k)
    p = 0.0 if top_p is None or top_p <= 0 else float(top_p)
    if k == 0 and p == 0.0:
        k = 1  # greedy
    if k > 0 and p == 0.0:
        p = 1.0
    return SamplingParams(
        temperature=t, top_k=k, top_p=p, seed=0 if seed is None else int(seed), max_new_tokens=int(max_new_tokens),
        stop_token_ids=(int(end_id),) if end_id is not None and end_id >= 0 else (), ignore_eos=True,
        repetition_penalty=1.0 if repetition_penalty is None else float(repetition_penalty),
        presence_penalty=0.0 if presence_penalty is None else float(presence_penalty),
        frequency_penalty=0.0 if frequency_penalty is None else float(frequency_penalty),
        min_tokens=0 if min_tokens is None else int(min_tokens),
        stop_words=_token_sequences(stop_words), bad_words=_token_sequences(bad_words),
        return_log_probs=return_log_probs, normalize_log_probs=normalize_log_probs,
    )  # fmt: skip


def _token_sequences(words: Iterable[Sequence[int]]) -> TokenSequences:
    return tuple(tuple(int(t) for t in word) for word in words)
