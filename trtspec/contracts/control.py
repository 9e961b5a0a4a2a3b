"""How the operations loop reaches a running deployment: the small control interface it acts through, and what one
change did.

The loop (trtspec.ops: windows, drift, recommendations) decides; a server's implementation acts
(`trtspec.triton.control.TritonControl`: Triton model control on a torch-flavour repository). The command line joins
them (`trtspec monitor --apply --url ...`), so the loop never imports a server. Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class KChange:
    """What a change of a served model's default k did."""

    model: str
    old_k: int
    new_k: int
    persisted: Path | None  # the file that now holds the new k (None: not persisted; `note` says why)
    note: str = ""


class ServerControl(Protocol):
    """A running deployment, as far as the operations loop changes it."""

    def check(self, models: Sequence[str]) -> None:
        """Refuse before anything is watched when no change could be made: raises ServerError (exit 1) when the server
        does not answer or is not ready, TrtspecError naming why otherwise (a model it does not serve, or whose k
        it cannot set: exit 2)."""
        ...

    def set_default_k(self, model: str, k: int) -> KChange:
        """Serve `model` with default k = `k` from now on, failing no request; raises TrtspecError naming why not."""
        ...
