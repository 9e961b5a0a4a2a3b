"""`trtspec tune tree`: Medusa's greedy tree search, replayed acceptance, and the written choices file."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from click.testing import CliRunner

from trtspec import choices
from trtspec.cli.main import cli
from trtspec.spec.tree import tree_from_spec
from trtspec.training.tree_tune import (
    expected_accept_length,
    greedy_tree,
    rank_accuracy,
    replay_accept_length,
)

ACCURACY = torch.tensor([[0.5, 0.2, 0.1], [0.4, 0.2, 0.05], [0.3, 0.1, 0.05]], dtype=torch.float64)


def _all_prefix_closed_trees(num_heads: int, max_rank: int, budget: int):
    nodes = [p for d in range(1, num_heads + 1) for p in itertools.product(range(max_rank), repeat=d)]
    for subset in itertools.combinations(nodes, budget):
        chosen = set(subset)
        if all(p[:-1] in chosen or len(p) == 1 for p in chosen):
            yield [list(p) for p in subset]


@pytest.mark.parametrize("budget", [1, 3, 5])
def test_greedy_tree_is_optimal_for_the_independence_estimate(budget):
    tree = greedy_tree(ACCURACY[:2], budget)
    choices.validate(tree, max_depth=2, max_nodes=budget)  # prefix-closed, within budget
    assert len(tree) == budget
    best = max(expected_accept_length(t, ACCURACY[:2]) for t in _all_prefix_closed_trees(2, 3, budget))
    assert expected_accept_length(tree, ACCURACY[:2]) == pytest.approx(best)


def test_greedy_tree_prefers_rank_zero_chain_when_heads_are_sharp():
    sharp = torch.tensor([[0.9, 0.05], [0.9, 0.05], [0.9, 0.05]], dtype=torch.float64)
    assert greedy_tree(sharp, 3) == [[0], [0, 0], [0, 0, 0]]


def test_replay_walks_like_the_engine_and_rank_accuracy():
    ranks = torch.tensor([[[0, 0, 0], [0, 1, 5], [1, 0, 0], [5, 0, 0]],
                          [[5, 0, 0], [1, 0, 0], [0, 1, 5], [0, 0, 0]]])  # [n, span, heads]; max_rank 5 = miss
    acc = rank_accuracy(ranks.flatten(0, 1), max_rank=5)
    assert acc[0].tolist() == [0.5, 0.25, 0, 0, 0]
    tree = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
    # sequence 1: one step accepts 3 (+1) and jumps past the end; sequence 2: steps of 0, 1 and 3 accepted tokens
    assert replay_accept_length(tree, ranks) == pytest.approx((4 + 1 + 2 + 4) / 4)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_cli_writes_choices_usable_by_the_tree_builder(trained_heads, random_pair, tmp_path, suffix):
    heads_dir, _ = trained_heads
    out = tmp_path / f"tree{suffix}"
    result = CliRunner().invoke(cli, ["tune", "tree", "--model", str(random_pair[0]), "--medusa", str(heads_dir),
                                      "--budget", "12", "--prompts", "4", "--prompt-len", "8", "--new-tokens", "16",
                                      "--out", str(out), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["num_nodes"] == 12 and len(report["rank_accuracy"]) == 4
    assert report["replayed_acceptance_length"] >= 1.0
    parsed = choices.parse(str(out))
    assert parsed == report["medusa_choices"]
    assert choices.parse(report["triton"]) == parsed
    assert tree_from_spec(str(out), num_heads=4, max_nodes=12).num_nodes == 12
