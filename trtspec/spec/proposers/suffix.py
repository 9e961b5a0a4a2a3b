"""Suffix decoding (Oliaro et al. 2024, arXiv 2411.04975): model-free drafts that learn from the traffic.

Two kinds of suffix tree, kept by arctic-inference's `SuffixDecodingCache` (Snowflake's implementation, the one vLLM's
`method: suffix` uses; C++ trees, host memory only):
  - per request: the prompt and the tokens generated so far (prompt lookup, but over every earlier match at once);
  - global: the outputs of earlier and in-flight requests (prompts are not added), at most `max_cached_requests`
    of them, the oldest evicted first (FIFO).
Each step the last `max_tree_depth` tokens of the context are matched against both trees, for every match length
m; a match yields a draft of at most min(k, max_spec_factor * m + max_spec_offset) tokens, grown from the matched
node by frequency: a node's score is the share of the occurrences of the matched suffix that continue through it,
and nodes scoring below `min_token_prob` are not drafted. The draft with the highest total score wins (ties: the
per-request tree). So a long, unambiguous match drafts many tokens, a short or contested one few, and no match
none (k = 0 for that step: plain decoding). With `tree` the draft is a frequency-ordered token tree (parents first,
so any prefix of its nodes is a tree), else the single most frequent path.

Drafts are one-hot (the frequencies are not the distributions the tokens were drawn from), so verification is exact
at any temperature: greedy by argmax, sampling by (recursive, for trees) rejection with q = delta at each node.
Greedy outputs never depend on the cache; a seeded sampled output may (drafts decide which random draws are made),
though its distribution never does.

Lifecycle (the engine's optional hooks): `observe_prompt` at admission starts the request's tree; `commit` and
`propose` append the committed tokens (they reach the global tree at once, so concurrent requests learn from each
other); `observe_finish` appends the last ones; `free` drops the request's own tree, its output stays in the global
cache until evicted. A preempted request keeps its trees (host state).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ToolNotFoundError
from trtspec.methods.suffix import SUFFIX
from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext

ARCTIC_VERSION = "0.3.0"  # the release trtspec is tested with (pyproject: the `suffix` extra; scripts/install_suffix.sh)
# PyPI ships it as source only: pip compiles a C++20 extension, and its isolated build would first download torch>=2.10
INSTALL_HINT = ("pip install 'setuptools>=70.1' wheel nanobind==2.9.2 ninja cmake && pip install "
                f"--no-build-isolation arctic-inference=={ARCTIC_VERSION} (a C++ compiler is needed; builds against "
                "the installed torch; in a checkout: bash scripts/install_suffix.sh PYTHON)")


def load_arctic() -> Any:
    """arctic_inference.suffix_decoding, or ToolNotFoundError with the install hint."""
    try:
        from arctic_inference import suffix_decoding
    except ImportError as exc:
        raise ToolNotFoundError(f"method suffix needs arctic-inference's suffix decoding, which is not importable "
                                f"({exc})", hint=INSTALL_HINT) from None
    return suffix_decoding


class SuffixProposer(Proposer):
    """Suffix decoding over a per-request and a global (cross-request) suffix tree (see module docstring).

    Example:
        prompt [5, 6, 7, 8, 5, 6], k=4, max_spec_factor=1: the suffix [5, 6] (m = 2) occurred once before and
        continued [7, 8, ...], so the draft is [7, 8] (at most 1 * 2 tokens). After requests whose outputs contained
        [9, 5, 6, 7, 8, 9] finished, the same context matches [9, 5, 6] in the global tree too (m = 3) and drafts
        [7, 8, 9].
    """

    name: ClassVar[str] = SUFFIX.proposer_key()  # its method home names it

    def __init__(self, config: SuffixConfig | None = None) -> None:
        self.config = (config or SuffixConfig()).validate()
        self._arctic = load_arctic()
        # arctic's max_cached_requests: -1 = unbounded (never used), 0 = off, n = FIFO bound
        self.cache = self._arctic.SuffixDecodingCache(max_tree_depth=self.config.max_tree_depth,
                                                      max_cached_requests=self.config.max_cached_requests)
        self._fed: dict[int, int] = {}  # request id -> tokens of its context already in the cache (prompt + output)

    @classmethod
    def create(cls, ctx: ProposerContext) -> SuffixProposer:
        return cls(ctx.options.suffix)

    @classmethod
    def check_installed(cls) -> None:
        load_arctic()  # ToolNotFoundError (exit 3) with the install hint

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def observe_prompt(self, request_id: int, prompt_ids: list[int]) -> None:
        """Admission: build the request's own tree from its prompt (again after a preemption: kept)."""
        if request_id not in self._fed:
            self.cache.start_request(request_id, list(prompt_ids))
            self._fed[request_id] = len(prompt_ids)

    def commit(self, request_id: int, token_ids: list[int]) -> None:
        self._feed(request_id, token_ids)

    def observe_finish(self, request_id: int, token_ids: list[int]) -> None:
        """The finished request's whole context: its last tokens join both trees before `free`."""
        self._feed(request_id, token_ids)

    def preempt(self, request_id: int) -> None:
        """Recompute preemption: the trees live on the host, keep them (the drafts stay what they would have been)."""

    def free(self, request_id: int) -> None:
        """Drop the request's own tree; its output stays in the global cache until evicted."""
        if self._fed.pop(request_id, None) is not None:
            self.cache.stop_request(request_id)

    def reset(self) -> None:
        """Forget the traffic: evict every output from the global cache (active requests keep their own trees)."""
        for request_id in list(self.cache.cached_requests):
            self.cache.evict_cached_response(request_id)

    @property
    def num_cached_requests(self) -> int:
        return len(self.cache.cached_requests)

    # -- proposing -----------------------------------------------------------------------------------------------
    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        return [self._propose_one(item) for item in batch]

    def _propose_one(self, item: ProposeInput) -> Draft:
        return self.speculate(item)[0]

    def speculate(self, item: ProposeInput) -> tuple[Draft, float, int]:
        """One request's draft, with arctic-inference's score of it (the sum of its tokens' estimated acceptance
        probabilities: its expected accepted length) and the length of the context match it grew from."""
        if item.request_id not in self._fed:  # used without the engine's hooks: the context so far is the prompt
            self.observe_prompt(item.request_id, item.token_ids)
        self._feed(item.request_id, item.token_ids)
        c = self.config
        draft = self.cache.speculate(item.request_id, item.token_ids[-c.max_tree_depth:], max_spec_tokens=item.k,
                                     max_spec_factor=c.max_spec_factor, max_spec_offset=c.max_spec_offset,
                                     min_token_prob=c.min_token_prob, use_tree_spec=c.tree)
        token_ids, parents = list(draft.token_ids)[: item.k], tuple(draft.parents)[: item.k]  # parents-first
        if not token_ids:
            return Draft.empty(), 0.0, 0
        is_chain = all(p == i - 1 for i, p in enumerate(parents))
        score = float(sum(list(draft.probs)[: item.k]))  # arctic's score, of the nodes kept
        return (Draft(token_ids=torch.tensor(token_ids, dtype=torch.long), parents=None if is_chain else parents),
                score, int(draft.match_len))

    def _feed(self, request_id: int, token_ids: list[int]) -> None:
        """Append the committed tokens the cache has not seen (to the request's tree and its global output)."""
        seen = self._fed.get(request_id)
        if seen is not None and len(token_ids) > seen:
            self.cache.add_active_response(request_id, list(token_ids[seen:]))
            self._fed[request_id] = len(token_ids)
