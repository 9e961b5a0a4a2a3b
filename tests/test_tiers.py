"""The test tiers (tests/tiers.py): what counts as starting trtspec in a child, the guard that fails a unit test doing
so before the child starts, and the fixtures that put the tests that request them in the `process` tier."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiers import guard, starts_processes, trtspec_child

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("argv", "trtspec"), [
    ([sys.executable, "-m", "trtspec", "serve", "out/r"], True),
    ([sys.executable, "-u", "-m", "trtspec.supervise", "--workdir", "w"], True),
    ([sys.executable, str(ROOT / "scripts" / "demo_serve.py"), "--build", "b"], True),
    (["/opt/tritonserver/bin/tritonserver", "--model-repository", "r"], True),
    (["trtllm-serve", "tiny"], True),
    ([Path("/usr/local/bin/trtspec"), "models"], True),
    ([sys.executable, "-c", "import trtspec.targets"], False),  # an import check: a unit test may
    ([sys.executable, "-m", "pip", "--version"], False),
    (["bash", "-n", "cmd.sh"], False),
    (["python3", "-c", "pass"], False),  # not this environment's Python: a stand-in's
    ("ls -l", False),
    ([], False),
])
def test_what_starts_trtspec_in_a_child(argv, trtspec):
    assert bool(trtspec_child(argv)) is trtspec


def test_a_unit_test_that_starts_trtspec_in_a_child_fails_before_the_child_starts():
    with pytest.raises(pytest.fail.Exception, match=r"started trtspec in a child process: .* -m trtspec --version\. "
                                                    r"`make check` runs no such test: mark the test "
                                                    r"@pytest.mark.process"):
        subprocess.run([sys.executable, "-m", "trtspec", "--version"], capture_output=True)
    process = multiprocessing.get_context("spawn").Process(target=int)
    with pytest.raises(pytest.fail.Exception, match="a multiprocessing child .*tests/forked.py"):
        process.start()
    assert process.pid is None


def test_the_guard_names_the_fixture_that_started_it():
    with guard.setting_up("server (tests/x/test_y.py)"), \
            pytest.raises(pytest.fail.Exception, match=r"fixture `server \(tests/x/test_y.py\)` starts it: put "
                                                       r"@starts_processes \(tests/tiers.py\) under its @pytest.fixture"):
        subprocess.Popen([sys.executable, "-m", "trtspec.supervise"])


def test_a_short_python_child_is_a_unit_tests_to_start():
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


@pytest.fixture
@starts_processes
def declared() -> None:
    """Declared as one that starts trtspec in a child (it starts nothing)."""


@pytest.fixture
def through(declared) -> None:
    pass


def test_a_test_that_requests_a_process_fixture_is_in_the_process_tier(request, through):
    assert request.node.get_closest_marker("process")
