"""The trtllm-serve server's pieces that need no running server: request mapping and its refusals (field, value and
fix named), the stop-string hold-back, the iteration-statistics options and buffer, and `trtspec serve
--trtllm-serve` up to the command it would run (--dry-run), from flags or from a PyTorch-workflow build output."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.cli_checks import run_cli
from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError
from trtspec.ports import free_ports
from trtspec.trtllm_serve import protocol as p
from trtspec.trtllm_serve.app import IterationBuffer
from trtspec.trtllm_serve.server import BOUND_KEY, HARD_CAP, NVIDIA_DEFAULT, IterStatsOptions

ENCODER = p.Encoder(lambda text, special: ([0] if special else []) + [ord(c) % 50 + 2 for c in text],
                    lambda messages: "\n".join(m["content"] for m in messages), end_id=1)


def parse(body: dict, kind: str = p.COMPLETION) -> p.ServeRequest:
    return p.parse_request(kind, {"model": "tiny", **body}, model="tiny", encoder=ENCODER, max_context=128)


def test_a_completion_maps_to_the_engine_parameters():
    req = parse({"prompt": "ab", "max_tokens": 5, "temperature": 0, "top_k": 3, "seed": 7, "stop": "zz",
                 "stop_token_ids": [9], "stream": True, "stream_options": {"include_usage": True}})
    s = req.sampling
    assert req.prompt_ids == ENCODER.encode("ab", True) and req.stream and req.include_usage
    assert (s.max_new_tokens, s.temperature, s.top_k, s.seed, s.stop_token_ids) == (5, 0.0, 3, 7, (9,))
    assert s.stop_words == (tuple(ENCODER.encode("zz", False)),) and req.stop_strings == ("zz",)
    unset = parse({"prompt": [5, 6]}).sampling  # OpenAI's defaults: temperature and top_p 1, up to the context
    assert (unset.temperature, unset.top_p, unset.max_new_tokens) == (1.0, 1.0, 126)
    chat = parse({"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}]}],
                  "max_completion_tokens": 4}, p.CHAT)
    assert chat.prompt_ids == parse({"prompt": "ab"}).prompt_ids and chat.sampling.max_new_tokens == 4


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"prompt": "a", "n": 2}, "n", "one choice"),
    ({"prompt": "a", "max_tokens": -1}, "max_tokens", ">= 1"),
    ({"prompt": "a", "max_tokens": "8"}, "max_tokens", "whole number"),
    ({"prompt": "a", "model": 7}, "model", "not a string"),
    ({"prompt": "a", "temperature": -0.5}, "temperature", ">= 0"),
    ({"prompt": "a", "top_p": 0}, "top_p", "(0, 1]"),
    ({"prompt": "a", "logprobs": 2}, "logprobs", "no log-probs"),
    ({"prompt": "a", "use_beam_search": True}, "use_beam_search", "beam search"),
    ({"prompt": "a", "frobnicate": 1}, "frobnicate", "not a field"),
    ({"prompt": "a", "stream_options": {"include_usage": True}}, "stream_options", "stream=true"),
    ({"prompt": ["a", "b"]}, "prompt", "one prompt per request"),
    ({"prompt": ""}, "prompt", "empty"),
    ({"prompt": "a", "stop": [1]}, "stop", "strings"),
])
def test_a_request_that_cannot_be_served_names_the_field_the_value_and_the_fix(body, field, words):
    with pytest.raises(ConfigError) as info:
        parse(body)
    body_json = p.error_body(info.value)
    assert info.value.field == field and body_json["param"] == field and body_json["code"] == 400
    assert words in body_json["message"] and "(fix: " in body_json["message"]
    assert body_json["object"] == "error" and body_json["type"] == "BadRequestError"


def test_any_model_name_is_served_and_answered_back_as_trtllm_serve_does():
    """trtllm-serve never reads `model` and answers with the request's (postprocess_handlers.py @01bf1923); its
    request classes require it, a string."""
    assert parse({"prompt": "a", "model": "TinyLlama-1.1B-Chat-v1.0"}).model == "TinyLlama-1.1B-Chat-v1.0"
    assert parse({"prompt": "a"}).model == "tiny"
    with pytest.raises(ConfigError, match="is required") as info:
        p.parse_request(p.COMPLETION, {"prompt": "a"}, model="tiny", encoder=ENCODER, max_context=128)
    assert info.value.field == "model" and "model='tiny'" in p.error_body(info.value)["message"]


def test_chat_refusals_name_chat_fields():
    with pytest.raises(ConfigError, match="messages"):
        parse({"messages": []}, p.CHAT)
    with pytest.raises(ConfigError, match=r"messages\[0\].content"):
        parse({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}, p.CHAT)
    engine_error = ConfigError("prompt", "900 tokens", "does not fit the model's context")
    assert p.renamed(engine_error, p.CHAT).field == "messages"
    assert p.renamed(ConfigError("max_new_tokens", 0, "must be >= 1"), p.COMPLETION).field == "max_tokens"


def feed_all(req: p.ServeRequest, pieces: list[str], reason: str) -> tuple[list[str], str, object]:
    out = p.TextOutput(req)
    shown = [out.feed(piece, [5]) for piece in pieces]
    rest, stop = out.finish(reason)
    return shown, out.shown, stop


def test_a_stop_string_is_held_back_while_it_may_start_and_cut_at_the_end():
    req = parse({"prompt": "a", "stop": ["END"]})
    shown, text, stop = feed_all(req, ["abc E", "N", "D"], "stop")
    assert shown == ["abc ", "", ""] and text == "abc " and stop == "END"
    shown, text, stop = feed_all(req, ["abc E", "x"], "length")  # not a stop string after all: shown in order
    assert shown == ["abc ", "Ex"] and text == "abc Ex" and stop is None
    kept = parse({"prompt": "a", "stop": ["END"], "include_stop_str_in_output": True})
    assert feed_all(kept, ["abc E", "ND"], "stop")[1:] == ("abc END", "END")
    out = p.TextOutput(parse({"prompt": "a", "stop_token_ids": [7]}))
    out.feed("x", [7])
    assert out.finish("stop") == ("", 7) and out.tokens == 1
    eos = p.TextOutput(parse({"prompt": "a"}))
    eos.feed("xy", [5, 1])  # the end token is not part of the output
    assert eos.finish("stop") == ("", None) and eos.tokens == 1


def test_iteration_options_from_the_llm_api_file_the_flags_or_this_servers_default():
    for release in BOUND_KEY:
        assert IterStatsOptions.resolve(None, release=release) == IterStatsOptions(True, 1000)  # no options: on here
        assert IterStatsOptions.resolve({}, release=release) == IterStatsOptions(False, 1000)  # trtllm-serve's: off
        with pytest.raises(ConfigError, match="enable_iter_perf_stats"):
            IterStatsOptions.resolve({"enable_iter_perf_stats": "yes"}, release=release)
        with pytest.raises(ConfigError, match=f"^{BOUND_KEY[release]}='many'"):
            IterStatsOptions.resolve({BOUND_KEY[release]: "many"}, release=release)
    on = {"enable_iter_perf_stats": True, "max_stats_len": 50, "iter_stats_max_iterations": 7}
    # 1.2.1: max(max_stats_len, 1), the executor's bound; iter_stats_max_iterations has no effect there
    assert IterStatsOptions.resolve(on, release="1.2.1") == IterStatsOptions(True, 50)
    assert [IterStatsOptions.resolve({"max_stats_len": n}, release="1.2.1").max_iterations for n in (0, -1, 3)] \
        == [1, 1, 3]
    # 1.3.0rc29: iter_stats_max_iterations, None or 0 -> 1000, negative: unbounded there, HARD_CAP here
    assert IterStatsOptions.resolve(on, release="1.3.0rc29") == IterStatsOptions(True, 7)
    assert [IterStatsOptions.resolve({"iter_stats_max_iterations": n}, release="1.3.0rc29").max_iterations
            for n in (None, 0, -1, -50, 5)] == [1000, 1000, HARD_CAP, HARD_CAP, 5]
    # the command line sets the release's key, over the file's
    assert IterStatsOptions.resolve(on, release="1.2.1", enabled=False, max_iterations=7) == IterStatsOptions(False, 7)
    assert IterStatsOptions.resolve(on, release="1.3.0rc29", max_iterations=0) == IterStatsOptions(True, 1000)
    assert IterStatsOptions.resolve(on, release="1.3.0rc29", max_iterations=-1).max_iterations == HARD_CAP


def test_the_bounding_keys_are_the_facts_files():
    """BOUND_KEY and its rules say what trtspec/targets/iteration-stats.json says of each release."""
    from importlib import resources

    from trtspec.contracts.trtllm_iterations import RELEASES

    facts = json.loads((resources.files("trtspec.targets") / "iteration-stats.json").read_text())["releases"]
    assert tuple(BOUND_KEY) == RELEASES
    old, rc = facts["1.2.1"], facts["1.3.0rc29"]
    assert old["enabling_options"]["max_stats_len"]["default"] == NVIDIA_DEFAULT
    assert "clamped to >= 1" in old["enabling_options"]["max_stats_len"]["effect"]
    assert "no effect" in old["enabling_options"]["iter_stats_max_iterations"]["effect"]
    assert "without bound" in old["queue_bounds"]["server"]
    assert "None or 0 -> 1000, < 0 -> unbounded" in rc["enabling_options"]["iter_stats_max_iterations"]["effect"]


def test_the_server_reads_its_bound_by_the_release_it_serves():
    from trtspec.trtllm_serve.server import parse_args

    for release, value, kept in (("1.2.1", "0", 1), ("1.3.0rc29", "0", 1000), ("1.3.0rc29", "-1", HARD_CAP),
                                 ("1.3.0rc29", "16", 16)):
        _, options = parse_args(["--target", "tiny", "--release", release, "--iter-stats-max-iterations", value])
        assert options.iter_stats == IterStatsOptions(True, kept), (release, value)


def test_the_buffer_keeps_the_newest_and_each_drain_empties_it():
    buffer = IterationBuffer(3)
    for i in range(5):
        buffer.add(i)
    assert buffer.drain() == [2, 3, 4] and buffer.dropped == 2 and buffer.drain() == []
    buffer.add(5)
    assert buffer.drain() == [5]
    none = IterationBuffer(0)
    none.add(1)
    assert none.drain() == []


def serve_dry(*args: str) -> tuple[int, str, str]:
    return run_cli(["serve", "--trtllm-serve", "--dry-run", *args])


def test_dry_run_prints_the_server_command_from_the_engine_flags():
    (port,) = free_ports(1)
    code, out, err = serve_dry("--model", "tiny", "--draft", "tiny-draft", "--method", "draft_target", "--k", "3",
                               "--http-port", str(port), "--iter-stats-max-iterations", "16")
    assert code == 0, err
    assert "-m trtspec.trtllm_serve --target tiny --draft tiny-draft --default-k 3" in out
    assert f"--port {port} --served-model-name tiny --release 1.2.1 --iter-stats --iter-stats-max-iterations 16" in out


def test_a_pytorch_workflow_build_output_is_served_with_its_llm_api_options(tmp_path: Path):
    build = tmp_path / "build"
    (build / "llm-api").mkdir(parents=True)
    options = "backend: pytorch\nmax_stats_len: 50\niter_stats_max_iterations: 7\n"  # 1.2.1 reads max_stats_len
    (build / "llm-api" / "extra_llm_api_options.yaml").write_text(options)
    engine = EngineConfig(target="tiny", draft="tiny-draft", method="draft_target", default_k=2)
    (build / "trtspec-manifest.json").write_text(json.dumps({
        "format": "trtspec-manifest/1", "backend": "tensorrtllm", "method": "draft_target", "workflow": "pytorch",
        "config": {"trtllm": {"version": "1.2.1"}}, "engine": engine.to_dict(), "engines": {},
        "llm_api": "llm-api/extra_llm_api_options.yaml"}))
    (port,) = free_ports(1)
    code, out, err = serve_dry(str(build), "--http-port", str(port))
    assert code == 0, err  # enable_iter_perf_stats absent: off, as trtllm-serve
    assert "--default-k 2" in out and "--no-iter-stats --iter-stats-max-iterations 50" in out
    code, out, err = serve_dry(str(build), "--http-port", str(port), "--iter-stats")
    assert code == 0 and "--iter-stats --iter-stats-max-iterations 50" in out
    manifest = json.loads((build / "trtspec-manifest.json").read_text())
    manifest["config"]["trtllm"]["version"] = "1.3.0rc29"  # reads iter_stats_max_iterations instead
    (build / "trtspec-manifest.json").write_text(json.dumps(manifest))
    code, out, err = serve_dry(str(build), "--http-port", str(port))
    assert code == 0 and "--release 1.3.0rc29 --no-iter-stats --iter-stats-max-iterations 7" in out, err
    code, out, err = serve_dry(str(build), "--http-port", str(port), "--iter-stats-max-iterations", "-1")
    assert code == 0 and f"--iter-stats-max-iterations {HARD_CAP}" in out, err
    manifest["config"]["trtllm"]["version"] = "1.2.1"
    (build / "trtspec-manifest.json").write_text(json.dumps(manifest))
    engines = tmp_path / "engines"
    engines.mkdir()
    manifest = json.loads((build / "trtspec-manifest.json").read_text())
    (engines / "trtspec-manifest.json").write_text(json.dumps({**manifest, "workflow": "engine", "llm_api": None}))
    code, out, err = serve_dry(str(engines), "--http-port", str(port))
    assert code == 2 and "TensorRT-engine build" in err


def test_refusals_before_anything_starts():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code, _, err = serve_dry("--http-port", str(busy.getsockname()[1]))
        assert code == 2 and "--http-port" in err and "in use" in err
    code, _, err = serve_dry("--dynamo", "2")
    assert code == 2 and "pick one" in err
    code, _, err = run_cli(["serve", "--dynamo", "1", "--iter-stats", "--dry-run"])
    assert code == 2 and "--iter-stats applies to --trtllm-serve" in err
    code, _, err = serve_dry("--router-mode", "kv")
    assert code == 2 and "--router-mode applies to a Dynamo deployment" in err
