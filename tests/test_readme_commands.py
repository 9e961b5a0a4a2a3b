"""The README's quick tour, run as written and in order in one temp directory: every command but the demo scripts
(tests/test_readme_demos.py runs those beside it) and those that need TensorRT-LLM. How: tests/readme_tour.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.readme_tour import (
    Tour,
    all_commands,
    is_demo,
    moved_ports,
    port_rewrite,
    quick_tour,
    run_command,
    server_ports,
    tour_in,
)

COMMANDS = all_commands()
TOUR = [i for i, tokens in enumerate(COMMANDS) if not is_demo(tokens)]


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tour]:
    with tour_in(tmp_path_factory, "readme", [COMMANDS[i] for i in TOUR]) as state:
        yield state


@pytest.mark.triton
@pytest.mark.dynamo
@pytest.mark.parametrize("index", TOUR, ids=[f"{i:02d}-{' '.join(COMMANDS[i][:3])}" for i in TOUR])
def test_readme_command(tour: Tour, index: int) -> None:
    run_command(tour, COMMANDS, index)


def test_the_harness_fails_a_failing_command_and_an_http_error(tmp_path: Path) -> None:
    """What the tour checks, on commands that fail: a trtspec exit code (in-process), and an HTTP error answer that
    plain curl would exit 0 on (the README's curl lines: a wrong model name answers 404)."""
    import http.server
    import threading

    tour = Tour(tmp_path, dict(os.environ), {})
    with pytest.raises(pytest.fail.Exception, match=r"(?s)exit 2\): trtspec generate --k -1 x\n.*--k"):
        tour.run(["trtspec", "generate", "--k", "-1", "x"])
    assert tour.failed == "trtspec generate --k -1 x"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"localhost:{server.server_address[1]}/v1/chat/completions"
        with pytest.raises(pytest.fail.Exception, match=r"exit 22\): curl -s"):
            tour.run(["curl", "-s", url])
    finally:
        server.shutdown()


def test_port_rewrite_moves_servers_and_their_urls() -> None:
    commands = quick_tour("## Quick tour\n\n```bash\ntrtspec serve out/r  # Triton\ncurl -s localhost:8002/metrics | "
                          "grep x\ntrtspec serve --dynamo 2 \\\n  --k 2\ntrtspec generate --url localhost:8001 \"a b\"\n```\n")
    assert commands[1] == ["curl", "-s", "localhost:8002/metrics", "|", "grep", "x"]
    assert server_ports(commands[2]) == {"--http-port": [8000], "--system-port": [8081, 8082]}
    moved = port_rewrite(commands, {8000: 9000, 8002: 9002, 8081: 9081, 8082: 9082})
    assert moved == [["trtspec", "serve", "out/r", "--http-port", "9000", "--metrics-port", "9002"],
                     ["curl", "-s", "localhost:9002/metrics", "|", "grep", "x"],
                     ["trtspec", "serve", "--dynamo", "2", "--k", "2", "--http-port", "9000", "--system-port", "9081"],
                     ["trtspec", "generate", "--url", "localhost:8001", "a b"]]
    assert set(moved_ports(commands, owned=False)) == {8000, 8001, 8002, 8081, 8082}
