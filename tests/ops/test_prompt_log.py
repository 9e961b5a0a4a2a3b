"""The prompt log: off by default, sampled at the stated rate, bounded in size across rotations, and read back as
the served model wrote it (damaged lines skipped and counted; a log with nothing usable is a one-line error)."""

from __future__ import annotations

import json

import pytest

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.prompt_log import BACKUPS, LOG_NAME, MIB, PromptLog, log_files, read_prompt_log
from trtspec.errors import ConfigError


def test_logging_is_off_by_default():
    assert EngineConfig(target="tiny").prompt_log is None
    assert "log_prompts" not in EngineConfig(target="tiny").to_parameters()


def test_round_trip_through_the_reader(tmp_path):
    log = PromptLog(tmp_path, sample_rate=1.0, max_mb=1, model="tensorrt_llm", version="2")
    prompts = [[5, 6, 7], [8], [9, 10]]
    for i, ids in enumerate(prompts):
        assert log.offer(ids, prompt=f"p{i} é", max_tokens=4, temperature=0.0)
    log.close()
    read, skipped = read_prompt_log(tmp_path)
    assert skipped == 0
    assert [r.prompt_ids for r in read] == [tuple(p) for p in prompts]
    assert [r.prompt for r in read] == ["p0 é", "p1 é", "p2 é"]
    line = json.loads((tmp_path / LOG_NAME).read_text(encoding="utf-8").splitlines()[0])
    assert line["model"] == "tensorrt_llm" and line["version"] == "2" and line["max_tokens"] == 4


def test_sample_rate_is_the_share_logged(tmp_path):
    log = PromptLog(tmp_path, sample_rate=0.1, max_mb=8, seed=3)
    logged = sum(log.offer([1, 2, 3]) for _ in range(5000))
    log.close()
    assert 0.08 * 5000 < logged < 0.12 * 5000  # binomial(5000, 0.1): sd 21, so +-100 is ~4.7 sd
    assert len(read_prompt_log(tmp_path)[0]) == logged
    silent = PromptLog(tmp_path / "zero", sample_rate=0.0, max_mb=1)
    assert not any(silent.offer([1]) for _ in range(200))


def test_rotation_keeps_the_log_under_its_bound_and_the_newest_lines(tmp_path):
    max_mb = 0.05
    log = PromptLog(tmp_path, sample_rate=1.0, max_mb=max_mb)
    for i in range(3000):
        log.offer(list(range(i % 50 + 1)), prompt=f"prompt {i}")
    log.close()
    files = log_files(tmp_path)
    assert len(files) == BACKUPS + 1
    assert sum(f.stat().st_size for f in files) <= max_mb * MIB
    read, _ = read_prompt_log(tmp_path)
    assert read[-1].prompt == "prompt 2999"  # oldest dropped, newest kept, in order
    numbers = [int(r.prompt.split()[1]) for r in read]
    assert numbers == sorted(numbers)


def test_a_deployments_workers_each_log_apart_and_are_read_together(tmp_path):
    """A Dynamo deployment of two workers: each writes DIR/worker-i (one writer per file); DIR reads them all."""
    for i in (0, 1):
        log = PromptLog(tmp_path / f"worker-{i}", sample_rate=1.0, max_mb=1.0)
        log.offer([i, i + 1], prompt=f"p{i}")
        log.close()
    prompts, skipped = read_prompt_log(tmp_path)
    assert [p.prompt_ids for p in prompts] == [(0, 1), (1, 2)] and skipped == 0
    assert [f.parent.name for f in log_files(tmp_path)] == ["worker-0", "worker-1"]


def test_damaged_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\nnot json\n{"prompt_ids": []}\n{"prompt_ids": [1, true]}\n\xff\xfe\n'
                     b'{"prompt_ids": [3, 4]}\n{"prompt": "cut by a cra')
    read, skipped = read_prompt_log(path)
    assert [(r.prompt_ids, r.prompt) for r in read] == [(None, "ok"), ((3, 4), None)]
    assert skipped == 5


@pytest.mark.parametrize("content", [b"", b"\n\n", b'{"text": "x"}\n{"prompt": ""}\n[1, 2]\n'])
def test_a_log_without_usable_prompts_is_refused(tmp_path, content):
    path = tmp_path / "log.jsonl"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="has no usable prompts") as info:
        read_prompt_log(path)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("field, value", [("log_sample_rate", 1.5), ("log_sample_rate", -0.1),
                                          ("log_max_mb", 0.0), ("log_max_mb", float("inf"))])
def test_bad_logging_parameters_are_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=f"parameter {field}"):
        EngineConfig.from_parameters({"target": "tiny", "log_prompts": "logs", field: str(value)})


def test_a_client_side_tap_of_openai_requests_feeds_train_draft(tmp_path):
    """A deployment that logs no prompts (trtllm-serve, Triton's llmapi model): its clients append each OpenAI request
    body as one JSON line; the reader takes completions' prompts (text, texts, token ids) and chats' messages, which
    `train draft` renders with the target's chat template (the embedded target's here) before tokenising."""
    from trtspec.models import resolve_model
    from trtspec.training.distill import DistillRecipe, chat_renderer, split_prompts

    tap = tmp_path / "requests.jsonl"
    bodies = [{"model": "tiny", "prompt": "def add(a, b):", "max_tokens": 16},
              {"model": "tiny", "prompt": ["import os", "class A:"]},
              {"model": "tiny", "prompt": [3, 4, 5]},
              {"model": "tiny", "messages": [{"role": "user", "content": "def mul(a, b):"}], "stream": True},
              {"model": "tiny", "messages": [{"role": "user", "content": 7}]}]  # not a chat a server takes
    tap.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    logged, skipped = read_prompt_log(tap)
    assert skipped == 1
    assert [p.prompt for p in logged[:3]] == ["def add(a, b):", "import os", "class A:"]
    assert logged[3].prompt_ids == (3, 4, 5) and logged[4].messages is not None

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    render = chat_renderer(tokenizer)
    assert render is not None and render([{"role": "user", "content": "def mul(a, b):"}]) == "def mul(a, b):"
    split = split_prompts(logged, tokenizer.encode, tokenizer.vocab_size + 8, DistillRecipe(), render_chat=render)
    texts = {tokenizer.decode(ids) for ids in split.train + split.heldout}
    assert "def mul(a, b):" in texts and len(split.train) + len(split.heldout) == 5
    without = split_prompts(logged, tokenizer.encode, tokenizer.vocab_size + 8, DistillRecipe())
    assert without.num_skipped == 1  # no template: the chat is skipped, not guessed
