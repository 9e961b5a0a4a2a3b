"""The draft model proposer's greedy path for one request (k forwards, the argmax fed back as a tensor, no per-token
distributions) drafts what the general batched path drafts, and leaves the draft cache in the same state."""

from __future__ import annotations

from trtspec.spec.model import LlamaModel
from trtspec.spec.params import SamplingParams
from trtspec.spec.proposers.base import ProposeInput
from trtspec.spec.proposers.draft_model import DraftModelProposer


def test_one_greedy_request_drafts_what_the_batched_path_drafts(random_pair):
    model = LlamaModel.from_pretrained(random_pair[1])
    alone = DraftModelProposer(model, model.config.vocab_size)  # one request per call: the greedy path
    batched = DraftModelProposer(model, model.config.vocab_size)  # a second request in every call: the general path
    greedy = SamplingParams(temperature=0.0, max_new_tokens=64)
    context, other = list(range(3, 21)), [7, 8, 9]
    alone.add_request(0)
    for rid in (0, 1):
        batched.add_request(rid)
    for step, (k, accept) in enumerate([(4, 2), (3, 3), (5, 0), (1, 1)]):
        mine = alone.propose([ProposeInput(0, context, k, greedy, None)])[0]
        theirs = batched.propose([ProposeInput(0, context, k, greedy, None),
                                  ProposeInput(1, other, k, greedy, None)])[0]
        assert mine.token_ids.tolist() == theirs.token_ids.tolist(), step
        assert mine.num_tokens == k and mine.draft_probs is None  # one-hot: the verifier's greedy rule
        assert theirs.draft_probs is not None and theirs.draft_probs.argmax(-1).tolist() == mine.token_ids.tolist()
        # the target keeps `accept` draft tokens and adds one of its own (a token the draft did not propose)
        context = context + mine.token_ids.tolist()[:accept] + [(step * 13 + 5) % model.config.vocab_size]
        for proposer in (alone, batched):
            proposer.commit(0, context)
        assert alone.states[0].cached_ids == batched.states[0].cached_ids
        assert alone.cache.length(alone.states[0].slot) == len(alone.states[0].cached_ids)
