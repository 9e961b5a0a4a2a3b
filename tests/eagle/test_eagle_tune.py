"""`trtspec tune tree --eagle`: per-depth ranks along the target's path (one batched pass) agree with the proposer
drafting incrementally, the static tree's replay equals the proposer's walk with that tree, and the CLI writes a
choices file the engine runs losslessly."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.eagle.conftest import PROMPTS
from trtspec.cli.main import cli
from trtspec.contracts.engine import EagleTree
from trtspec.training.eagle_tree_tune import calibrate_eagle, eagle_ranks, replay_proposer, tune_static
from trtspec.training.tree_tune import replay_accept_length

DEPTH = 4


@pytest.fixture(scope="module")
def calibration(eagle_target, trained_eagle):
    return calibrate_eagle(eagle_target, trained_eagle[0], num_prompts=6, prompt_len=12, new_tokens=40)


def test_batched_ranks_equal_the_proposer_chain(calibration):
    """Depth-1 rank 0 means the chain proposer's first token is the target's; deeper, where the chain so far was
    right, its next token is right exactly when the batched pass ranks the truth first."""
    ranks = eagle_ranks(calibration, DEPTH, max_rank=8)  # [n, span, depth]
    chain = [[0] * d for d in range(1, DEPTH + 1)]
    # the walk with a chain accepts the leading run of rank-0 depths, at every commit point it visits
    tree = EagleTree(choices=tuple(map(tuple, chain)))
    assert replay_proposer(calibration, DEPTH, tree, horizon=DEPTH)["replayed_acceptance_length"] == \
        pytest.approx(replay_accept_length(chain, ranks))
    assert 0 < (ranks == 0).float().mean() < 1  # the drafter is right sometimes, wrong sometimes


def test_batched_ranks_equal_incremental_drafting_along_the_path(calibration):
    """At sampled commit points: feed the context, then the target's own tokens one at a time with the drafter's
    output features (a chain: each token sees the context and its ancestors); its ranks equal the batched pass."""
    import torch

    drafter, seq, aux, start = calibration.drafter, calibration.sequences, calibration.aux, calibration.prompt_len
    ranks = eagle_ranks(calibration, DEPTH, max_rank=8)
    to_draft = {int(t): i for i, t in enumerate(drafter.draft_ids)}
    checked = 0
    for i in range(2):
        for t in range(0, ranks.shape[1], 7):
            c = start + t  # context = the first c tokens; features 0..c-2 fed with tokens 1..c-1
            cache = drafter.new_cache(num_slots=1, max_slots=1)
            slot = torch.tensor([cache.alloc()])
            with torch.inference_mode():
                features = drafter.combine(aux[i : i + 1, : c - 1])  # [1, c - 1, hidden]
            logits, out = drafter(seq[i : i + 1, 1:c], features, cache, slot)
            logits, out = logits[:, -1:], out[:, -1:]
            for d in range(DEPTH):
                truth = to_draft.get(int(seq[i, c + d]))
                expected = 8 if truth is None else min(8, int((logits[0, 0] > logits[0, 0, truth]).sum()))
                assert int(ranks[i, t, d]) == expected, (i, t, d)
                logits, out = drafter(seq[i : i + 1, c + d : c + d + 1], out, cache, slot)
                checked += 1
    assert checked >= 8 * DEPTH


def test_static_tree_replay_equals_the_proposer_walk(calibration):
    result = tune_static(calibration, budget=8, depth=DEPTH, max_rank=8)
    tree = result["eagle_choices"]
    assert len(tree) == 8 and max(len(p) for p in tree) <= DEPTH
    walked = replay_proposer(calibration, 8, EagleTree(choices=tuple(map(tuple, tree))), horizon=DEPTH)
    assert walked["replayed_acceptance_length"] == pytest.approx(result["replayed_acceptance_length"])
    assert result["replayed_acceptance_length"] > 1.0


def test_cli_tunes_static_and_dynamic_and_the_engine_runs_the_result(eagle_target, trained_eagle, tmp_path):
    from trtspec.contracts.engine import ProposerOptions
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    out = tmp_path / "tree.yaml"
    result = CliRunner().invoke(cli, ["tune", "tree", "--model", str(eagle_target), "--eagle", str(trained_eagle[0]),
                                      "--budget", "6", "--prompts", "4", "--prompt-len", "12", "--new-tokens", "24",
                                      "--eagle-topk", "1,3", "--eagle-depth", "2,4", "--threads", "1", "--out",
                                      str(out), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    shapes = report["dynamic"]["shapes"]
    assert [(s["eagle_topk"], s["eagle_depth"]) for s in shapes] == [(1, 2), (1, 4), (3, 2), (3, 4)]
    best = max(s["replayed_acceptance_length"] for s in shapes)
    assert report["dynamic"]["best"]["replayed_acceptance_length"] == best
    assert set(report["recommended"]) in ({"eagle_choices"}, {"eagle_topk", "eagle_depth"})
    # the file records the best dynamic shape, which a build takes as eagle.dynamic_tree (k = the nodes it drafts)
    import yaml

    from trtspec.config import parse_build_spec

    recorded, best_row = yaml.safe_load(out.read_text())["dynamic_tree"], report["dynamic"]["best"]
    assert (recorded["topk"], recorded["depth"]) == (best_row["eagle_topk"], best_row["eagle_depth"])
    assert recorded["max_total_draft_tokens"] == min(6, recorded["topk"] * recorded["depth"])
    spec = parse_build_spec({"backend": "torch", "method": "eagle", "target": str(eagle_target),
                             "eagle": {"model": str(trained_eagle[0]), "eagle3": True, "dynamic_tree": str(out)}})
    assert (spec.eagle.topk, spec.eagle.depth, spec.max_draft_len) == (
        recorded["topk"], recorded["depth"], recorded["max_total_draft_tokens"])
    engine = SpecEngine.from_pretrained(eagle_target, eagle=trained_eagle[0], max_k=8,
                                        options=ProposerOptions(eagle_tree=EagleTree.parse(str(out))))
    sampling = SamplingParams(max_new_tokens=24)
    plain = [o.token_ids for o in engine.generate(PROMPTS, sampling, SpecParams("none", 0))]
    assert [o.token_ids for o in engine.generate(PROMPTS, sampling, SpecParams("eagle3", 6))] == plain


def test_cli_refuses_both_or_neither_drafter_and_bad_shapes(eagle_target):
    from tests.cli_checks import run_cli

    for extra, message in (([], "exactly one of --medusa and --eagle"),
                           (["--eagle", "x", "--medusa", "y"], "exactly one of --medusa and --eagle"),
                           (["--eagle", "tiny-eagle", "--eagle-topk", "0,2"], "--eagle-topk=0: must be an integer in [1, 64]")):
        code, _, err = run_cli(["tune", "tree", "--model", str(eagle_target), *extra])
        assert code == 2 and message in err
