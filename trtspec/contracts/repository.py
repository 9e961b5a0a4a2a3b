"""The repository record, `trtspec-repo.json`: what `trtspec deploy` says about a repository it rendered, for the
commands that serve or operate it (`trtspec serve` and `serve --dynamo`, `rollout-draft`, `monitor`).

Written once by deploy (triton/repo.py `repo_record`), read back typed (`RepoRecord.read`); a repository trtspec did
not render has none (`read` returns None) and is served as it is. Pure Python (pydantic).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_serializer, field_validator

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError, UsageError, shown

REPO_RECORD = "trtspec-repo.json"
FIX = "re-render the repository with `trtspec deploy --force`"


class RepoRecord(BaseModel):
    """One rendered repository: its flavour, the models it holds, how to launch it, what it serves."""

    model_config = ConfigDict(frozen=True, extra="ignore", arbitrary_types_allowed=True)

    backend: Literal["torch", "tensorrtllm"]
    method: str = "none"
    models: tuple[str, ...] = ()  # the model directories tritonserver loads
    decoupled: bool = False
    world_size: int = 1  # MPI ranks the TensorRT-LLM models need (1: the torch flavour)
    max_k: int = 8
    trtllm_version: str | None = None  # the release whose Triton contract was rendered
    image: str | None = None  # the NGC container of that release
    templates: str | None = None  # where the templates came from (tensorrtllm_backend tag and path)
    baseline: str | None = None  # the baseline file in the repository (`trtspec deploy --baseline`)
    observability: dict[str, str] = {}  # prometheus_rules, grafana_dashboard: file names in the repository
    engine: EngineConfig | None = None  # the engine configuration it serves (absent in records before it existed)

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, value: Any) -> EngineConfig | None:
        return EngineConfig.from_dict(value, "engine") if isinstance(value, dict) else value

    @field_serializer("engine")
    def _engine_dict(self, engine: EngineConfig | None) -> dict[str, Any] | None:
        return None if engine is None else engine.to_dict()

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @classmethod
    def read(cls, repo: Path) -> RepoRecord | None:
        """The record of repository `repo` (None when trtspec did not render it); ConfigError naming the file and
        the field when it cannot be read; UsageError when `repo` is not a directory."""
        repo = Path(repo)
        if not repo.is_dir():
            raise UsageError(f"model repository {repo} does not exist", hint="render one with `trtspec deploy`")
        path = repo / REPO_RECORD
        if not path.is_file():
            return None
        try:
            return cls.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            error = exc.errors()[0]
            problem = " ".join(error["msg"].split())
            if not error["loc"]:  # not JSON, or not an object
                what = "is not UTF-8 JSON" if error["type"] in ("json_invalid", "json_type") else \
                    "is not a JSON object as `trtspec deploy` writes it"
                raise ConfigError(str(path), "unreadable", f"{what} ({problem})", hint=FIX) from None
            where = ".".join(str(p) for p in error["loc"])
            raise ConfigError(f"{path}: {where}", shown(error.get("input")), problem, hint=FIX) from None
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc.field}", exc.value, exc.problem, hint=FIX) from None
