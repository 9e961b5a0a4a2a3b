"""Rich progress bars for long library work that reports `(stage, done, total, info)` callbacks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def stage_progress(*, disable: bool = False) -> Iterator[Callable[[str, int, int, str], None]]:
    """`with stage_progress() as progress: work(progress=progress)`: one bar per stage, on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn("{task.description:10}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), disable=disable) as bar:
        tasks: dict[str, int] = {}

        def progress(stage: str, done: int, total: int, info: str) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total, info="")
            bar.update(tasks[stage], completed=done, info=info)

        yield progress
