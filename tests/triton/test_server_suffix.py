"""Method suffix in the torch-flavour Triton repository: `trtspec build build_configs/tiny-suffix.yaml`, `trtspec
deploy --suffix NAME=VALUE` (options over the build's, written as the served model's `suffix_*` parameters), and a real
tritonserver whose served engine keeps the cross-request suffix cache: it learns from live traffic, so the same
request sent again is drafted from the first one's output and accepts more, while every answer stays the target's own
greedy output. A cache turned off (`--suffix max_cached_requests=0`) does not warm."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest

from tests.servers import running
from tests.triton import helpers
from tests.triton.helpers import build_example
from trtspec.cli.main import main
from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.suffix import SuffixConfig
from trtspec.triton.client import TritonClient

MAX_TOKENS = 48
# prompts the embedded target has not been sent in this module before the warm-up test
PROMPTS = ["def parse_header(line):", "class Cache:\n    def get(self, key):", "import json\nwith open(path) as f:"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The torch bundle of build_configs/tiny-suffix.yaml (its `suffix:` section recorded in trtspec-bundle.json)."""
    return build_example("tiny-suffix", tmp_path_factory.mktemp("suffix") / "bundle")


def deploy(bundle: Path, out: Path, *flags: str) -> tuple[int, str]:
    """`trtspec deploy --backend torch` in-process: (exit code, stdout + stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(["deploy", "--backend", "torch", "--build", str(bundle), "--out", str(out), *flags])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, stdout.getvalue() + stderr.getvalue()


def served_params(repo: Path) -> EngineConfig:
    """The tensorrt_llm model's parameters as Triton hands them to the model."""
    text = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    pairs = re.findall(r'key: "([^"]+)"\s*value: \{\s*string_value: "([^"]*)"', text)
    return EngineConfig.from_parameters(dict(pairs))


def test_deploy_writes_the_builds_options_and_the_flags_over_them(bundle, tmp_path):
    code, output = deploy(bundle, tmp_path / "default")
    assert code == 0, output
    assert served_params(tmp_path / "default").suffix == SuffixConfig()  # the example's section = the defaults
    code, output = deploy(bundle, tmp_path / "tuned", "--suffix", "max_cached_requests=64", "--suffix",
                          "min_token_prob=0.3", "--suffix", "tree=false")
    assert code == 0, output
    params = served_params(tmp_path / "tuned")
    assert params.method == "suffix" and params.default_k == 16
    assert params.suffix == SuffixConfig(max_cached_requests=64, min_token_prob=0.3, tree=False)


@pytest.mark.parametrize(("flags", "message"), [
    (["--suffix", "max_cached_requests=-5"], "--suffix max_cached_requests=-5: must be an integer in [0, 2147483647]"),
    (["--suffix", "max_spec_factor=fast"], "--suffix max_spec_factor='fast': is not a number"),
    (["--suffix", "cache=9"], "--suffix cache='9': is not a suffix decoding option"),
    (["--suffix", "max_cached_requests"], "'max_cached_requests' is not NAME=VALUE"),
])  # fmt: skip
def test_deploy_refuses_bad_suffix_options_in_one_line(bundle, tmp_path, flags, message):
    code, output = deploy(bundle, tmp_path / "repo", *flags)
    assert code == 2 and message in output, output
    assert "Traceback" not in output and output.count("Error: ") == 1 and not (tmp_path / "repo").exists()


def test_deploy_refuses_suffix_options_for_another_method(tmp_path, random_pair):
    from tests.triton.helpers import torch_bundle

    build = torch_bundle(tmp_path / "ngram", random_pair[0], None, method="ngram")
    code, output = deploy(build, tmp_path / "repo", "--suffix", "max_cached_requests=5")
    assert code == 2 and "--suffix={'max_cached_requests': 5}: shapes method suffix, but the method is ngram" in output, output


def serve_twice(url: str, model: str, prompts: list[str]) -> list[tuple[str, list[int], int]]:
    """Each prompt twice in a row to a freshly loaded engine model: (prompt, generated token ids, accepted drafts)."""
    out = []
    with TritonClient(url, model=model) as client:
        for prompt in prompts:
            for _ in range(2):
                done = client.generate(prompt, max_tokens=MAX_TOKENS)
                out.append((prompt, done.token_ids, done.total_accepted_draft_tokens))
    return out


def add_engine_model(source: Path, repo: Path, name: str) -> None:
    """Another repository's engine model (`tensorrt_llm`, as deploy wrote it) beside `repo`'s, served as `name`."""
    shutil.copytree(source, repo / name)
    config = repo / name / "config.pbtxt"
    config.write_text(config.read_text().replace('\nname: "tensorrt_llm"\n', f'\nname: "{name}"\n', 1))
    assert f'name: "{name}"' in config.read_text()


@pytest.fixture(scope="module")
def target_greedy():
    return helpers.target_greedy(MAX_TOKENS)


@pytest.mark.triton
def test_the_served_cache_learns_from_live_traffic(bundle, tmp_path, target_greedy):
    assert deploy(bundle, tmp_path / "warm")[0] == 0
    assert deploy(bundle, tmp_path / "off", "--suffix", "max_cached_requests=0")[0] == 0
    # one server: the default deployment, with the cache-off deployment's engine model beside it
    add_engine_model(tmp_path / "off" / "tensorrt_llm", tmp_path / "warm", "tensorrt_llm_off")
    with running(tmp_path / "warm") as server:
        warm = serve_twice(server.grpc_url, "tensorrt_llm", PROMPTS)
        off = serve_twice(server.grpc_url, "tensorrt_llm_off", PROMPTS)
    for prompt, ids, _ in warm + off:  # lossless either way: the target's greedy tokens
        assert ids and ids == target_greedy(prompt), prompt
    for i in range(0, len(warm), 2):
        (_, ids, accepted_1), (_, _, accepted_2) = warm[i], warm[i + 1]
        # the repeat drafts from the first answer, now in the served model's global tree: it accepts more, so the
        # same tokens take fewer target forwards (each forward commits its accepted drafts + 1)
        print(f"{warm[i][0]!r}: {len(ids)} tokens, accepted {accepted_1} then {accepted_2}; cache off: "
              f"{off[i][2]} then {off[i + 1][2]}")
        assert accepted_2 > accepted_1 and accepted_2 >= 0.6 * len(ids), (accepted_1, accepted_2, len(ids))
        assert off[i + 1][2] == off[i][2]  # no cross-request cache: the same request drafts the same (own tree only)
