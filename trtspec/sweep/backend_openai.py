"""Sweep via `openai`: measure acceptance and speed against an OpenAI-compatible endpoint (a Dynamo deployment from
`trtspec serve --dynamo N`, or any server of trtspec workers).

Every request goes through the `openai` SDK to `http://URL/v1`: `/v1/completions` with the suite's prompt as text,
or `/v1/chat/completions` with it as one user message when the sweep's `chat_template` is `model` (the server
applies the model's own template). Each request states the case: `temperature`, `seed` = case seed + i,
`max_tokens` = max_new_tokens with `ignore_eos` (as the engine backend runs), and the speculation in Dynamo's
`nvext.annotations` (`trtspec:method=...`, `trtspec:k=...`: trtspec.contracts.openai.annotations), so one
deployment serves every method its workers have the models for, at every k.

Acceptance comes from each response's usage: `completion_tokens_details.accepted_prediction_tokens` and
`rejected_prediction_tokens` (drafted = accepted + rejected). The number of drafts is not in OpenAI's usage: it is
estimated as drafted / k (the engine drafts k tokens per step but for the last steps of a request), so the mean
acceptance length is an estimate, marked `source: openai_usage`; the workers' /metrics have the exact series.
"""

from __future__ import annotations

import math
import time
from typing import Any

from trtspec.contracts.metrics import AcceptanceStats, acceptance_rate, mean_acceptance_length  # data only, no torch
from trtspec.errors import ConfigError, ServerError
from trtspec.sweep.grid import BASELINE, Case, SweepSpec
from trtspec.sweep.prompts import PromptSuite


def base_url(url: str) -> str:
    """The OpenAI base URL of a sweep's `url` (host:port, or a full http(s) URL)."""
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = f"http://{url}"
    return url if url.endswith("/v1") else f"{url}/v1"


class OpenAIBackend:
    """Sweep cases against an OpenAI-compatible server (see the module docstring)."""

    name = "openai"

    def __init__(self, client: Any = None) -> None:
        self.client = client
        self.url: str | None = None
        self.model: str | None = None

    def preflight(self, spec: SweepSpec) -> None:
        from trtspec.contracts.openai import served_name

        self.url = base_url(spec.url or "")
        self.model = spec.model_name or served_name(spec.model)
        if self.client is None:
            try:
                from openai import OpenAI
            except ImportError:
                from trtspec.errors import ToolNotFoundError

                raise ToolNotFoundError("the openai package is not installed",
                                        hint="make install (extra `dynamo`), or pip install openai") from None
            self.client = OpenAI(base_url=self.url, api_key="unused", timeout=spec.timeout_s, max_retries=0)
        try:
            served = sorted(m.id for m in self.client.models.list())
        except Exception as exc:  # connection refused, HTTP error: the SDK's own types
            raise ServerError(f"{self.url}/models did not answer ({type(exc).__name__}: {exc})",
                              hint="start the server: `trtspec serve --dynamo N`, and pass its host:port as --url") from None
        if self.model not in served:
            raise ConfigError("model_name", self.model, f"is not served by {self.url} (it serves {served})",
                              hint="pass --model-name with one of the served names")

    def calibrate(self, spec: SweepSpec, model_set: Any) -> None:
        return None  # forward costs are measured in-process only; the report says so

    def run_case(self, case: Case, suite: PromptSuite, spec: SweepSpec) -> dict[str, Any]:
        """Every prompt of the suite, `concurrency` requests in flight (one client thread each)."""
        from concurrent.futures import ThreadPoolExecutor

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=case.concurrency) as pool:
            results = list(pool.map(lambda i: self._one_request(case, spec, suite.prompts[i], case.seed + i),
                                    range(len(suite.prompts))))
        wall = time.perf_counter() - start
        output_tokens = sum(r["completion_tokens"] for r in results)
        accepted = sum(r["accepted"] for r in results)
        drafted = accepted + sum(r["rejected"] for r in results)
        drafts = math.ceil(drafted / case.k) if case.k else 0
        stats = AcceptanceStats(num_emitted_tokens=output_tokens, wall_time_s=wall).to_dict()
        stats.update(num_draft_tokens=drafted, num_accepted_tokens=accepted, num_drafts=drafts,
                     num_accepted_tokens_per_pos=None, acceptance_rate_per_pos=None,
                     acceptance_rate=acceptance_rate(drafted, accepted),
                     mean_acceptance_length=mean_acceptance_length(drafts, accepted), source="openai_usage")
        return {"wall_time_s": wall, "num_requests": len(results), "output_tokens": output_tokens,
                "tokens_per_s": output_tokens / wall if wall > 0 else 0.0,
                "latencies_s": [r["latency_s"] for r in results], "stats": stats}

    def _one_request(self, case: Case, spec: SweepSpec, prompt: str, seed: int) -> dict[str, Any]:
        from trtspec.contracts.openai import annotations

        if self.client is None:
            raise ServerError("the OpenAI sweep backend has no client", hint="call preflight() before run_case()")
        method = case.method if case.k > 0 else BASELINE
        common = {"model": self.model, "max_tokens": case.max_new_tokens, "temperature": case.temperature,
                  "seed": seed, "extra_body": {"ignore_eos": True,
                                               "nvext": {"annotations": annotations(method=method, k=case.k)}}}
        start = time.perf_counter()
        if spec.chat_template is not None:
            response = self.client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **common)
        else:
            response = self.client.completions.create(prompt=prompt, **common)
        latency = time.perf_counter() - start
        usage = response.usage
        details = getattr(usage, "completion_tokens_details", None)
        return {"completion_tokens": usage.completion_tokens if usage else 0, "latency_s": latency,
                "accepted": (getattr(details, "accepted_prediction_tokens", 0) or 0) if details else 0,
                "rejected": (getattr(details, "rejected_prediction_tokens", 0) or 0) if details else 0}

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "model": self.model}

    def close(self) -> None:
        if self.client is not None and hasattr(self.client, "close"):
            self.client.close()
