"""The README quick tour's demo scripts (`python scripts/...`), run as written in a temp directory of their own: each
builds, sweeps, deploys and serves on its own (free ports, its own --work), so pytest-xdist runs this module beside
the rest of the tour (tests/test_readme_commands.py). How: tests/readme_tour.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.readme_tour import Tour, all_commands, is_demo, run_command, tour_in

COMMANDS = all_commands()
DEMOS = [i for i, tokens in enumerate(COMMANDS) if is_demo(tokens)]


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tour]:
    with tour_in(tmp_path_factory, "readme-demos", [COMMANDS[i] for i in DEMOS]) as state:
        yield state


def test_the_tour_has_its_demos() -> None:
    assert [" ".join(COMMANDS[i][:2]) for i in DEMOS] == ["python scripts/drift_demo.py", "python scripts/ops_loop.py"]


@pytest.mark.triton
@pytest.mark.parametrize("index", DEMOS, ids=[f"{i:02d}-{' '.join(COMMANDS[i][:3])}" for i in DEMOS])
def test_readme_demo(tour: Tour, index: int) -> None:
    run_command(tour, COMMANDS, index)
