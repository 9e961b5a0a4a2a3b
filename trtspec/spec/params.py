"""Per-request parameters: SamplingParams (what distribution to sample) and SpecParams (how to speculate).

Both are frozen dataclasses with `validate()`, which raises ConfigError naming the field, the value and the fix.
The engine validates every request before generating anything, so bad input never yields partial output.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtspec.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off; must be in (0, 1]
    seed: int | None = None  # per-request torch.Generator seed; None = fresh OS entropy
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()  # in addition to the model's EOS (unless ignore_eos)
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def validate(self) -> SamplingParams:
        if not self.temperature >= 0:
            raise ConfigError("temperature", self.temperature, "must be >= 0", hint="use 0 for greedy, e.g. 0.8 to sample")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p", self.top_p, "must be in (0, 1]", hint="use 1.0 to disable nucleus sampling")
        if self.top_k < 0:
            raise ConfigError("top_k", self.top_k, "must be >= 0", hint="use 0 to disable top-k")
        if self.max_new_tokens < 1:
            raise ConfigError("max_new_tokens", self.max_new_tokens, "must be >= 1", hint="e.g. 128")
        return self


@dataclass(frozen=True)
class SpecParams:
    method: str = "draft_target"  # one of trtspec.methods.engine_methods()
    # draft tokens per step (tree methods: nodes of the tree kept); 0 = plain decoding whatever the method;
    # with adaptive: the largest k
    k: int = 4
    adaptive: bool = False  # choose k in [0, k] every step from acceptance and step costs (spec/adaptive.py)
    # Tree drafts at temperature > 0: "exact" (recursive rejection sampling, lossless) or "typical_lossy" (Medusa's
    # typical acceptance: accepts more, but does NOT preserve the target distribution).
    acceptance: str = "exact"

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
            need = "a draft model (draft=...)" if info.needs_draft_model else "Medusa heads (medusa=...)"
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
        return self
