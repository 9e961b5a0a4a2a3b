"""Tree buffers and tree verification: structure, greedy exactness, lossless sampling, typical is lossy."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from trtspec.choices import MC_SIM_7B_63
from trtspec.errors import ConfigError
from trtspec.spec.tree import (
    TokenTree,
    greedy_walk,
    rejection_walk,
    tree_from_spec,
    typical_walk_lossy,
    verify_tree_greedy,
    verify_tree_rejection,
    verify_tree_typical_lossy,
)

SMALL = [[0], [1], [0, 0], [0, 1], [1, 0]]


def sampling(temperature: float = 1.0) -> SimpleNamespace:
    return SimpleNamespace(temperature=temperature, top_k=0, top_p=1.0)


def test_small_tree_buffers():
    tree = TokenTree.from_choices([[1], [0, 1], [0], [0, 0], [1, 0]])  # unsorted input is sorted by (depth, path)
    assert tree.parents.tolist() == [-1, 0, 0, 1, 1, 2]
    assert tree.depth.tolist() == [0, 1, 1, 2, 2, 2]
    assert tree.position_ids(10).tolist() == [10, 11, 11, 12, 12, 12]
    assert tree.node_head.tolist() == [0, 0, 1, 1, 1] and tree.node_rank.tolist() == [0, 1, 0, 1, 0]
    assert tree.retrieve_indices.tolist() == [[0, 1, 3], [0, 1, 4], [0, 2, 5]]
    expected = torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0],
                             [1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0], [1, 0, 1, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(tree.attention_mask, expected)
    assert tree.children[0].tolist() == [1, 2] and tree.children[2].tolist() == [5, -1]
    assert tree.path(4) == [1, 4]


def test_mc_sim_7b_63_shape():
    tree = tree_from_spec("mc_sim_7b_63", num_heads=4, max_nodes=63)
    assert tree.num_nodes == 63 and tree.max_depth == 4
    # every leaf path is root-down and consistent with the mask
    for row in tree.retrieve_indices.tolist():
        path = [n for n in row if n >= 0]
        assert path[0] == 0 and all(tree.parents[b] == a for a, b in itertools.pairwise(path))
    assert tree.attention_mask.sum() == (tree.depth + 1).sum()


@pytest.mark.parametrize(
    ("spec", "kwargs", "fragment"),
    [
        ("[[0], [0, 0], [0, 0, 0]]", {"num_heads": 2}, "[0, 0, 0]"),
        ("[[0], [1, 0]]", {"num_heads": 4}, "[1, 0]"),
        (MC_SIM_7B_63, {"num_heads": 4, "max_nodes": 32}, "63 nodes"),
        ("[[0], [0, x]]", {"num_heads": 4}, "'x'"),
        ("[[0], [0, 1", {"num_heads": 4}, "[[0], [0, 1"),
        ("- [0]\n- [0, -1]\n", {"num_heads": 4}, "[0, -1]"),
    ],
)
def test_bad_choices_name_the_offending_entry(spec, kwargs, fragment):
    with pytest.raises(ConfigError) as info:
        tree_from_spec(spec, **kwargs)
    assert fragment in str(info.value)


def _longest_match(tree: TokenTree, tokens: list[int], target_argmax: list[int]) -> int:
    lengths = [0]
    for node in range(1, tree.num_nodes + 1):
        path = tree.path(node)
        if all(tokens[n - 1] == target_argmax[int(tree.parents[n])] for n in path):
            lengths.append(len(path))
    return max(lengths)


def test_greedy_matches_brute_force_on_random_trees():
    gen = torch.Generator().manual_seed(0)
    tree = TokenTree.from_choices(MC_SIM_7B_63)
    vocab = 5  # small vocab: many matches, duplicates among siblings
    for _ in range(50):
        logits = torch.randn(tree.num_nodes + 1, vocab, generator=gen)
        tokens = torch.randint(0, vocab, (tree.num_nodes,), generator=gen)
        verdict = verify_tree_greedy(tree, tokens, logits)
        argmax = logits.argmax(-1).tolist()
        assert verdict.num_accepted == _longest_match(tree, tokens.tolist(), argmax)
        last = verdict.accepted_nodes[-1] if verdict.accepted_nodes else 0
        assert verdict.accepted_nodes == tree.path(last) and verdict.next_token_id == argmax[last]
        assert all(tokens[n - 1] == argmax[int(tree.parents[n])] for n in verdict.accepted_nodes)
        assert verdict.token_ids == [*(tokens[n - 1].item() for n in verdict.accepted_nodes), verdict.next_token_id]
    # temperature 0 routes the sampling verifiers to greedy
    logits = torch.randn(tree.num_nodes + 1, vocab, generator=gen)
    tokens = torch.randint(0, vocab, (tree.num_nodes,), generator=gen)
    greedy = verify_tree_greedy(tree, tokens, logits)
    assert verify_tree_rejection(tree, tokens, None, logits, sampling(0.0), gen) == greedy
    assert verify_tree_typical_lossy(tree, tokens, logits, sampling(0.0), gen) == greedy


# ---------------------------------------------------------------------------------------------------------------
# distribution tests: a known target over 3-token sequences (vocab 3), drafts verified on a depth-2 tree, the rest
# of the sequence completed from the target; the joint of the first 3 tokens is compared with chi-square.

VOCAB, LENGTH, TRIALS = 3, 3, 30_000
TREE = TokenTree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [2, 0]])


def _target_table(gen: torch.Generator) -> list[torch.Tensor]:
    """p(x1), p(x2 | x1), p(x3 | x1, x2) as tensors [V], [V, V], [V, V, V]."""
    return [torch.softmax(torch.randn((VOCAB,) * (d + 1), generator=gen) * 1.5, dim=-1) for d in range(LENGTH)]


def _node_prefixes(tokens: torch.Tensor) -> list[list[torch.Tensor]]:
    """Per node, its token path (root excluded) as [B] tensors."""
    return [[tokens[:, n - 1] for n in TREE.path(node)] for node in range(TREE.num_nodes + 1)]


def _tree_target_probs(table: list[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """target_probs for [root + nodes] from the table, per trial.  # [B, N + 1, V]"""
    rows = []
    for prefix in _node_prefixes(tokens):
        rows.append(table[len(prefix)][tuple(prefix)] if prefix else table[0].expand(tokens.shape[0], -1))
    return torch.stack(rows, dim=1)


def _complete(table: list[torch.Tensor], tokens: torch.Tensor, walk, gen: torch.Generator) -> torch.Tensor:
    """Emitted tokens of each trial, completed to LENGTH tokens by sampling the target.  # [B, LENGTH]"""
    batch = tokens.shape[0]
    out = torch.full((batch, LENGTH), -1, dtype=torch.long)
    for b_pos in range(TREE.max_depth):
        has = walk.num_accepted > b_pos
        node = walk.accepted_nodes[:, b_pos].clamp(min=1)
        out[:, b_pos] = torch.where(has, tokens.gather(1, (node - 1)[:, None])[:, 0], out[:, b_pos])
    out[torch.arange(batch), walk.num_accepted] = walk.next_token_ids
    for pos in range(LENGTH):
        missing = out[:, pos] < 0
        probs = table[pos][tuple(out[:, i] for i in range(pos))] if pos else table[0].expand(batch, -1)
        sampled = torch.multinomial(probs, 1, generator=gen)[:, 0]
        out[:, pos] = torch.where(missing, sampled, out[:, pos])
    return out


def _chi_square_z(samples: torch.Tensor, table: list[torch.Tensor]) -> float:
    """Wilson-Hilferty z-score of the chi-square statistic of the joint over VOCAB**LENGTH cells."""
    joint = table[0][:, None, None] * table[1][:, :, None] * table[2]  # [V, V, V]
    index = samples[:, 0] * VOCAB * VOCAB + samples[:, 1] * VOCAB + samples[:, 2]
    observed = torch.bincount(index, minlength=VOCAB**LENGTH).double()
    expected = joint.flatten().double() * samples.shape[0]
    stat = ((observed - expected) ** 2 / expected).sum().item()
    dof = VOCAB**LENGTH - 1
    return ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))


def _one_hot_tokens(batch: int) -> torch.Tensor:
    # deterministic Medusa-like children, including a duplicate sibling token (node 3 repeats node 1's token)
    return torch.tensor([0, 1, 0, 2, 0, 1, 1]).expand(batch, -1)


def test_recursive_rejection_is_lossless_one_hot():
    gen = torch.Generator().manual_seed(1234)
    table = _target_table(gen)
    tokens = _one_hot_tokens(TRIALS)
    walk = rejection_walk(TREE, tokens, None, _tree_target_probs(table, tokens), gen)
    assert walk.num_accepted.float().mean() > 0.5  # the tree actually accepts tokens
    assert abs(_chi_square_z(_complete(table, tokens, walk, gen), table)) < 4.0


def test_recursive_rejection_is_lossless_with_sampled_drafts():
    gen = torch.Generator().manual_seed(99)
    table = _target_table(gen)
    draft_probs = torch.softmax(torch.randn(TREE.num_nodes, VOCAB, generator=gen), -1).expand(TRIALS, -1, -1)
    tokens = torch.multinomial(draft_probs.reshape(-1, VOCAB), 1, generator=gen).view(TRIALS, -1)  # [B, N]
    walk = rejection_walk(TREE, tokens, draft_probs, _tree_target_probs(table, tokens), gen)
    assert walk.num_accepted.float().mean() > 0.5
    assert abs(_chi_square_z(_complete(table, tokens, walk, gen), table)) < 4.0


def test_typical_acceptance_is_lossy():
    """Medusa's typical acceptance keeps any plausible draft token: the output distribution shifts (lossy)."""
    gen = torch.Generator().manual_seed(7)
    table = _target_table(gen)
    tokens = _one_hot_tokens(TRIALS)
    logits = torch.log(_tree_target_probs(table, tokens))
    walk = typical_walk_lossy(TREE, tokens, logits, sampling(1.0), gen)
    assert _chi_square_z(_complete(table, tokens, walk, gen), table) > 20.0
    greedy = greedy_walk(TREE, tokens, logits)
    assert walk.num_accepted.float().mean() > greedy.num_accepted.float().mean()
