"""Live control of a running deployment: change a served engine model's default k or its speculation schedule without
failing a request.

`set_default_k(url, model, k)` reads the model's live configuration, checks k against its engine configuration, and reloads
the model through Triton's model-control API with that configuration carrying the new `default_k` (a config
override). Triton builds the new instance while the old one keeps serving and swaps them when the new one is ready;
the old one drains its running requests (EngineConfig.drain_timeout_s) before it is unloaded, so requests in flight
finish and later ones get the new k. With `repo`, the same change is written into the repository's config.pbtxt
(staged and checked before the reload, renamed into place after it), so a restart keeps it. A refused k, a
repository that is not the served one, or a failed reload changes nothing. `check_server(url, models)` checks
beforehand that such a change could be made (`trtspec monitor --apply` runs it before it watches). Pure Python: no
torch.

`set_schedule(url, model, schedule)` does the same for the model's SpecSchedule (trtspec.contracts.schedule: the
draft-length schedule, max_concurrency, the acceptance gate; optionally the default k in the same reload): the
schedule is checked against the served EngineConfig (its max_k; the schedule's own rules), its parameters replace the
served ones (a field it leaves unset is removed), and the reloaded model must report exactly them.

Changes to one server are serialized (`server_lock`: an exclusive flock on a lock file named by the server's
address, held from the read of the live configuration through the reload and the repository write; rollout-draft
takes the same lock), so racing `set-k` calls run one after another and each reports the k it really replaced.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.contracts.control import KChange, ScheduleChange, ServedSpeculation
from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, ServerError, UsageError
from trtspec.methods import BASELINE
from trtspec.triton.served_config import from_model_config


@dataclass(frozen=True)
class TritonControl:
    """The operations loop's ServerControl (trtspec.contracts.control) for a Triton server of the torch flavour: its
    gRPC `url`, and the served repository `repo` when changes should also be persisted there."""

    url: str
    repo: Path | None = None
    timeout_s: float = 120.0

    def check(self, models: Sequence[str]) -> None:
        check_server(self.url, models, timeout_s=min(self.timeout_s, CHECK_TIMEOUT_S))

    def served(self, model: str) -> ServedSpeculation:
        return served_speculation(self.url, model, timeout_s=min(self.timeout_s, CHECK_TIMEOUT_S))

    def set_default_k(self, model: str, k: int) -> KChange:
        return set_default_k(self.url, model, k, repo=self.repo, timeout_s=self.timeout_s)

    def set_schedule(self, model: str, schedule: SpecSchedule | None, *, default_k: int | None = None) -> ScheduleChange:
        return set_schedule(self.url, model, schedule, default_k=default_k, repo=self.repo, timeout_s=self.timeout_s)


CHECK_TIMEOUT_S = 10.0  # how long `check_server` waits for each answer


def check_server(url: str, models: Sequence[str], *, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Whether `set_default_k` could act on `models` at `url`: the server answers and is ready, and each model is
    loaded, a torch-flavour engine model, and speculates.

    Raises:
        ServerError: no server answers at `url`, it is not ready, or a model is not ready there.
        UsageError: a model that is not a torch-flavour engine model, or that runs method none.
    """
    from trtspec.triton.client import TritonClient

    with TritonClient(url, model=None, timeout_s=timeout_s) as client:
        if not client.server_ready():
            raise ServerError(f"url={url!r}: the Triton server is not ready (models still loading, or one failed)",
                              hint="wait until `trtspec serve` reports it ready, or see its log")
        for model in models:
            if not client.ready(model):
                raise ServerError(f"url={url!r}: model {model!r} is not ready there",
                                  hint="--url must be the gRPC port of the server whose metrics are watched")
            config = client.model_config(model)
            if "target" not in config.get("parameters", {}):
                raise UsageError(f"url={url!r}: model {model!r} is not a trtspec engine model of the torch flavour "
                                 "(its parameters have no target), so its k cannot be set live",
                                 hint="watch the engine model (--model tensorrt_llm); on the tensorrtllm flavour k "
                                      "is set per request (num_draft_tokens)")
            if from_model_config(config).method == BASELINE:
                raise UsageError(f"url={url!r}: model {model!r} runs method none (no speculation): it has no k to "
                                 "set", hint="watch the model that speculates (--model NAME)")


def set_default_k(url: str, model: str, k: int, *, repo: Path | None = None, dry_run: bool = False,
                  timeout_s: float = 120.0) -> KChange:
    """Reload `model` on the server at `url` (gRPC host:port) with default k = `k`; persist it under `repo`.

    Raises:
        UsageError: `model` is not a torch-flavour engine model, or `repo` is not the repository being served.
        ConfigError: k outside [0, max_k] of the model, or a model that does not speculate (method none).
        ServerError: no server, or the reload failed (the running model is unchanged).
    """
    from trtspec.triton.client import TritonClient

    with server_lock(url, timeout_s=timeout_s), TritonClient(url, model=model, timeout_s=timeout_s) as client:
        config = copy.deepcopy(client.model_config(model))
        live = served_engine(config, model)
        check_k(live, k, model)
        staged = None
        note = "not persisted: pass --repo REPO (the served repository) to keep it across restarts"
        if repo is not None:
            path = Path(repo) / model / "config.pbtxt"
            staged = config_with_parameter(path, "default_k", str(k), expect=live)
            note = ""
        if dry_run:
            return KChange(model, live.default_k, k, None, "dry run: nothing changed")
        config.setdefault("parameters", {})["default_k"] = {"string_value": str(k)}
        client.load_model(model, config)
        now = client.model_parameters(model).get("default_k")
        if now != str(k):
            raise ServerError(f"{model} reloaded but reports default_k={now!r}, not {k}",
                              hint="see the server log; the repository was not changed")
        if staged is not None:  # still under the lock: the repository follows the server in the same order
            from trtspec.atomic import write_text

            write_text(staged[0], staged[1])
    return KChange(model, live.default_k, k, staged[0] if staged else None, note)


SCHEDULE_FIELDS = tuple(SpecSchedule.PARAMETERS)  # SpecSchedule's fields, in its parameters' order


def set_schedule(url: str, model: str, schedule: SpecSchedule | None = None, *,
                 changes: Mapping[str, Any] | None = None, default_k: int | None = None, repo: Path | None = None,
                 dry_run: bool = False, timeout_s: float = 120.0) -> ScheduleChange:
    """Reload `model` on the server at `url` with `schedule` (None: no schedule) and, when given, default k
    `default_k`; persist it under `repo`.

    `changes` ({SpecSchedule field: value}, instead of `schedule`): the served schedule with those fields replaced, read
    under the lock, so a caller that changes some fields (`trtspec set-schedule`) keeps the rest as they are served at
    the moment of the change.

    Raises:
        ConfigError: the schedule breaks a rule (its own, or the served max_k), naming the entry and the rule.
        UsageError: `model` is not a torch-flavour engine model, runs method none, or `repo` is not the one served.
        ServerError: no server, or the reload failed (the running model is unchanged).
    """
    from trtspec.triton.client import TritonClient

    unknown = sorted(set(changes or {}) - set(SCHEDULE_FIELDS))
    if unknown or (changes is not None and schedule is not None):
        raise UsageError(f"changes: {unknown[0]!r} is not a schedule field" if unknown else
                         "give a whole schedule or changes to the served one, not both",
                         hint=f"the fields: {', '.join(SCHEDULE_FIELDS)}")
    with server_lock(url, timeout_s=timeout_s), TritonClient(url, model=model, timeout_s=timeout_s) as client:
        config = copy.deepcopy(client.model_config(model))
        live = served_engine(config, model)
        check_speculates(live, model)
        wanted = schedule if changes is None else merged_schedule(live.schedule, changes)
        new = with_schedule(live, wanted if wanted is None or wanted.to_parameters() else None, default_k)
        values = schedule_parameters(new)
        staged = None
        note = "not persisted: pass --repo REPO (the served repository) to keep it across restarts"
        if repo is not None:
            staged = config_with_parameters(Path(repo) / model / "config.pbtxt", values, expect=live)
            note = ""
        note = "; ".join(n for n in (note, capped_note(new)) if n)
        if dry_run:
            return ScheduleChange(model, live.schedule, new.schedule, live.default_k, new.default_k, None,
                                  "; ".join(n for n in ("dry run: nothing changed", capped_note(new)) if n))
        parameters = config.setdefault("parameters", {})
        for key, value in values.items():
            if value is None:
                parameters.pop(key, None)
            else:
                parameters[key] = {"string_value": value}
        client.load_model(model, config)
        now = client.model_parameters(model)
        wrong = {key: now.get(key) for key, value in values.items() if now.get(key) != value}
        if wrong:
            raise ServerError(f"{model} reloaded but reports {', '.join(f'{k}={v!r}' for k, v in wrong.items())}, not "
                              f"{', '.join(f'{k}={values[k]!r}' for k in wrong)}",
                              hint="see the server log; the repository was not changed")
        if staged is not None:  # still under the lock: the repository follows the server in the same order
            from trtspec.atomic import write_text

            write_text(staged[0], staged[1])
    return ScheduleChange(model, live.schedule, new.schedule, live.default_k, new.default_k,
                          staged[0] if staged else None, note)


def merged_schedule(served: SpecSchedule | None, changes: Mapping[str, Any]) -> SpecSchedule | None:
    """`served` with the fields of `changes` replaced; None when the result sets nothing. Raises ConfigError naming the
    entry and the rule when the result breaks one (e.g. a served threshold kept while the window goes to 0)."""
    values = {name: getattr(served or SpecSchedule(), name) for name in SCHEDULE_FIELDS}
    schedule = SpecSchedule(**{**values, **changes})
    return schedule if schedule.to_parameters() else None


def with_schedule(live: EngineConfig, schedule: SpecSchedule | None, default_k: int | None) -> EngineConfig:
    """The served configuration with `schedule` and (when given) `default_k`, checked as a whole (EngineConfig: the
    schedule's draft lengths within max_k, default_k within [0, max_k])."""
    from dataclasses import replace

    return replace(live, schedule=schedule, default_k=live.default_k if default_k is None else default_k)


def schedule_parameters(engine: EngineConfig) -> dict[str, str | None]:
    """The parameters a schedule change writes: every schedule parameter (None: removed) and default_k."""
    values = engine.schedule.to_parameters() if engine.schedule is not None else {}
    out: dict[str, str | None] = {name: values.get(name) for name in SpecSchedule.PARAMETERS.values()}
    out["default_k"] = str(engine.default_k)
    return out


def capped_note(engine: EngineConfig) -> str:
    """A note when the default k is below a draft length of the schedule (the schedule caps k, never raises it)."""
    schedule = engine.schedule
    top = max((value for _, value in schedule.draft_len), default=0) if schedule and schedule.draft_len else 0
    if top <= engine.default_k:
        return ""
    return (f"default k {engine.default_k} is below the schedule's draft length {top}: requests that do not ask for k "
            f"run at most {engine.default_k} (set the default k with --k {top})")


def served_speculation(url: str, model: str, *, timeout_s: float = CHECK_TIMEOUT_S) -> ServedSpeculation:
    """What `model` on the server at `url` speculates with now (its live configuration)."""
    from trtspec.triton.client import TritonClient

    with TritonClient(url, model=None, timeout_s=timeout_s) as client:
        live = served_engine(client.model_config(model), model)
    return ServedSpeculation(model, live.default_k, live.max_k, live.schedule)


def served_in_repository(repo: Path, model: str) -> ServedSpeculation:
    """What `model` of the repository `repo` speculates with (its config.pbtxt, as deployed or last changed)."""
    live = config_params(Path(repo) / model / "config.pbtxt")
    return ServedSpeculation(model, live.default_k, live.max_k, live.schedule)


LOCK_POLL_S = 0.05


def lock_path(url: str) -> Path:
    """The lock file of the server at `url` (gRPC host:port): one per address, loopback names folded together."""
    host, _, port = url.strip().lower().rpartition(":")
    host = "loopback" if host.strip("[]") in ("localhost", "127.0.0.1", "::1", "0.0.0.0", "") else host
    name = hashlib.sha256(f"{host}:{port}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"trtspec-control-{name}.lock"


@contextlib.contextmanager
def server_lock(url: str, *, timeout_s: float) -> Iterator[None]:
    """Hold the exclusive lock of the server at `url` (a `set-k` or `rollout-draft` under way) for the block.

    Raises ServerError when another change holds it for longer than `timeout_s`."""
    path = lock_path(url)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file: a read-only descriptor locks the same
        fd = os.open(path, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServerError(f"url={url!r}: another set-k or rollout-draft has been changing this server "
                                      f"for over {timeout_s:g} s (it holds {path})",
                                      hint="wait for it to finish, or raise --timeout") from None
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def served_engine(config: dict[str, Any], model: str) -> EngineConfig:
    """The EngineConfig of a served model's configuration; UsageError when it is not a trtspec engine model."""
    if "target" not in config.get("parameters", {}):
        raise UsageError(f"model {model!r} is not an engine model of the torch flavour (its parameters have no "
                         "target)", hint="name the engine model, e.g. --model tensorrt_llm; on the tensorrtllm "
                                         "flavour send num_draft_tokens per request")
    return from_model_config(config)


def check_speculates(params: EngineConfig, model: str) -> None:
    if params.method == BASELINE:
        raise UsageError(f"model {model!r} runs method none (no speculation): it has no k to set",
                         hint="set k on the model that speculates, e.g. --model tensorrt_llm")


def check_k(params: EngineConfig, k: int, model: str) -> None:
    check_speculates(params, model)
    if not 0 <= k <= params.max_k:
        raise ConfigError("k", k, f"must be in [0, max_k={params.max_k}] of model {model!r}",
                          hint=f"pick a k from 0 to {params.max_k} (0 turns speculation off); a larger max_k needs "
                               "a redeploy (`trtspec deploy --max-k`)")


_ENTRY = (r'^[ \t]*parameters:\s*\{{\s*key:\s*"{key}"\s*value:\s*\{{\s*string_value:\s*'
          r'"(?:[^"\\]|\\.)*"\s*\}}\s*\}}[ \t]*$')
_ANY_ENTRY = re.compile(r'^[ \t]*parameters:\s*\{.*$', re.M)


def config_with_parameter(path: Path, key: str, value: str, *, expect: EngineConfig) -> tuple[Path, str]:
    """(path, new text): `path`'s config.pbtxt with parameter `key` set to `value` (config_with_parameters)."""
    return config_with_parameters(path, {key: value}, expect=expect)


def config_with_parameters(path: Path, values: Mapping[str, str | None], *,
                           expect: EngineConfig | None) -> tuple[Path, str]:
    """(path, new text): `path`'s config.pbtxt with each parameter of `values` set (None: removed), checked, not
    written. A parameter the file lists is changed in its line; one it does not list gets a line after the last
    parameter, in trtspec's rendered form; every other line stays as it was.

    `expect` is the served model's EngineConfig: the file must describe the same model (same target, draft and
    method), so a change is never written into another repository (None: a model of NVIDIA's backend, whose
    parameters hold no EngineConfig; the caller read the file itself). The new text must parse as Triton's ModelConfig
    and hold exactly the new values.
    """
    from trtspec.triton.render import pbtxt_parameters, validate_model_config

    if not path.is_file():
        raise UsageError(f"--repo: {path} does not exist", hint="pass the repository directory the server runs")
    text = path.read_text(encoding="utf-8")
    on_disk = config_params(path) if expect is not None else None
    served = (expect.target, expect.draft, expect.method) if expect is not None else None
    if on_disk is not None and (on_disk.target, on_disk.draft, on_disk.method) != served:
        raise UsageError(f"--repo: {path} describes target={on_disk.target!r} draft={on_disk.draft!r} method="
                         f"{on_disk.method}, not the served model's {served}",
                         hint="pass the repository the server at --url runs, or leave --repo out")
    new = text
    for key, value in values.items():
        entry = re.compile(_ENTRY.format(key=re.escape(key)), re.M)
        found = entry.findall(new)
        if len(found) > 1 or (not found and re.search(rf'key:\s*"{re.escape(key)}"', new)):
            raise UsageError(f"--repo: {path} does not hold parameter {key} at most once in trtspec's rendered form",
                             hint="re-render the repository with `trtspec deploy --force`, or leave --repo out")
        if found and value is None:  # the line goes, with its newline
            new = re.compile(_ENTRY.format(key=re.escape(key)) + r"\n?", re.M).sub("", new)
        elif found:
            line = str(pbtxt_parameters({key: value}))
            new = entry.sub(lambda _, line=line: line, new)
        elif value is not None:
            line = str(pbtxt_parameters({key: value}))
            last = list(_ANY_ENTRY.finditer(new))
            at = last[-1].end() if last else len(new.rstrip("\n"))
            new = new[:at] + "\n" + line + new[at:]
    parsed = validate_model_config(new, source=str(path))
    for key, value in values.items():  # the edit did what it says (a proof, not a hope)
        now = parsed.parameters[key].string_value if key in parsed.parameters else None
        if now != value:
            raise UsageError(f"--repo: could not set {key} in {path}", hint="re-render it with `trtspec deploy --force`")
    return path, new


def config_params(path: Path) -> EngineConfig:
    """The EngineConfig of a repository's `MODEL/config.pbtxt` (parsed as Triton's ModelConfig first)."""
    from google.protobuf.json_format import MessageToDict

    from trtspec.triton.render import validate_model_config

    config = validate_model_config(Path(path).read_text(encoding="utf-8"), source=str(path))
    return from_model_config(MessageToDict(config, preserving_proto_field_name=True))
