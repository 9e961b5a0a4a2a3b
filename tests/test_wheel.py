"""The wheel deploys without a checkout.

Build the wheel from this checkout's sources, install it non-editable in a fresh venv, then, from a directory outside
the checkout and with only that venv's `trtspec` command: save the `tiny-torch` example, build the torch bundle,
`trtspec deploy`, `trtspec serve` (a real tritonserver on free 127.0.0.1 ports) and ask it over gRPC. The served
speculative answer (and the wheel's `trtspec generate --method suffix`) must equal plain greedy decoding of the same
prompt, computed once by this checkout's engine in the test process (the wheel is built from the same sources).

Third-party dependencies are not reinstalled (minutes of torch): a plain path line in a `.pth` file of the fresh
venv puts this interpreter's site-packages behind the venv's own. A directory added that way is not a site dir, so
its `.pth` files (this environment's editable trtspec) are not processed: `trtspec` can only come from the wheel,
which the test asserts.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from trtspec.triton.server import Ports

pytestmark = [pytest.mark.slow, pytest.mark.triton]
ROOT = Path(__file__).resolve().parents[1]
# What a wheel is built from (MANIFEST.in adds the top-level data dirs to an sdist the same way).
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "trtspec", "model_repo", "build_configs")
PROMPT = "def add(a, b):"
MAX_TOKENS = 12


def run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh venv with the wheel installed (no deps), and the environment to run its commands in."""
    base = tmp_path_factory.mktemp("wheel")
    # Build from a copy so the checkout gets no build/ or *.egg-info (and a concurrent build cannot interfere).
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        item = ROOT / name
        if item.is_dir():
            shutil.copytree(item, src / name, ignore=ignore)
        else:
            shutil.copy2(item, src / name)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRTSPEC_TEMPLATES", "PYTHONHOME")}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(src)], cwd=base,
        env=clean)
    wheels = list((base / "dist").glob("trtspec-*.whl"))
    assert len(wheels) == 1, wheels

    env_dir = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], cwd=base, env=clean)
    python = env_dir / "bin" / "python"
    # Install before the .pth below exists: pip then sees an empty environment and installs the wheel's own copy.
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheels[0])],
        cwd=base, env=clean)
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=base,
                    env=clean).stdout.strip())
    deps = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])  # this env's, in order
    (site / "_trtspec_test_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    env = {**clean, "PATH": os.pathsep.join([str(env_dir / "bin"), clean.get("PATH", "")])}
    return env_dir, env


@pytest.fixture()
def work(tmp_path) -> Path:
    work = tmp_path / "work"  # outside the checkout: nothing there but what the commands write
    work.mkdir()
    assert ROOT not in work.resolve().parents
    return work


def test_installed_trtspec_is_the_wheel_with_its_data(venv, work):
    env_dir, env = venv
    site = run([str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               cwd=work, env=env).stdout.strip()
    code = ("import sys, trtspec, trtspec.resources as r, trtspec.triton.render as t; "
            "print(trtspec.__file__); print(t.template_root()); print(r.data_dir('build_configs')); "
            "print([f for f in sys.meta_path if 'editable' in repr(f).lower()]); print(repr(sys.path))")
    module, templates, configs, editable_finders, path = run([str(env_dir / "bin" / "python"), "-c", code], cwd=work,
                                                             env=env).stdout.splitlines()
    shipped = Path(site) / "trtspec"
    assert Path(module) == shipped / "__init__.py"
    # this environment's editable trtspec is not reachable: no editable finder, the checkout itself is not on sys.path
    # (its .venv's site-packages may be, for the third-party dependencies)
    assert editable_finders == "[]" and str(ROOT) not in {str(Path(p).resolve()) for p in ast.literal_eval(path) if p}
    assert Path(templates) == shipped / "_data" / "model_repo"
    assert Path(configs) == shipped / "_data" / "build_configs"
    names = sorted(p.stem for p in (ROOT / "build_configs").glob("*.yaml"))
    assert sorted(p.stem for p in Path(configs).glob("*.yaml")) == names
    shipped_templates = sorted(p.relative_to(templates).as_posix() for p in Path(templates).rglob("*")
                               if p.is_file() and "__pycache__" not in p.parts)
    assert shipped_templates == sorted(p.relative_to(ROOT / "model_repo").as_posix()
                                       for p in (ROOT / "model_repo").rglob("*")
                                       if p.is_file() and "__pycache__" not in p.parts)
    doctor = {c["name"]: c for c in json.loads(run(["trtspec", "doctor", "--json"], cwd=work, env=env).stdout)}
    assert doctor["templates"]["ok"] and doctor["templates"]["detail"] == templates


def test_wheel_declares_the_suffix_extra_and_runs_suffix(venv, work):
    """`pip install 'trtspec[suffix]'` asks for arctic-inference (the dev extra does not: `make install` builds it
    with scripts/install_suffix.sh), and the installed wheel runs method suffix with it (here: this environment's
    arctic-inference, reached through the .pth) with the same greedy tokens as plain decoding."""
    env_dir, env = venv
    code = ("from importlib.metadata import requires; print('\\n'.join(r for r in requires('trtspec') "
            "if 'arctic' in r))")
    lines = run([str(env_dir / "bin" / "python"), "-c", code], cwd=work, env=env).stdout.split("\n")
    assert [line.replace(" ", "") for line in lines if line] == ['arctic-inference==0.3.0;extra=="suffix"'], lines
    suffix = json.loads(run(["trtspec", "generate", "--json", "--method", "suffix", "--max-new-tokens", str(MAX_TOKENS),
                             PROMPT], cwd=work, env=env).stdout)
    assert suffix["token_ids"] == plain_greedy() and suffix["token_ids"]


def test_wheel_builds_deploys_serves_and_answers(venv, work):
    env_dir, env = venv
    example = run(["trtspec", "build", "--example", "tiny-torch"], cwd=work, env=env).stdout
    (work / "tiny-torch.yaml").write_text(example)
    run(["trtspec", "build", "tiny-torch.yaml"], cwd=work, env=env)
    bundle = work / "out" / "build" / "tiny-torch"
    assert (bundle / "trtspec-manifest.json").is_file()
    run(["trtspec", "deploy", "--backend", "torch", "--build", "out/build/tiny-torch", "--out", "repo"],
        cwd=work, env=env)
    assert (work / "repo" / "tensorrt_llm" / "1" / "model.py").is_file()

    ports = Ports.free()
    serve = subprocess.Popen(["trtspec", "serve", "repo", "--grpc-port", str(ports.grpc), "--http-port",
                              str(ports.http), "--metrics-port", str(ports.metrics), "--startup-timeout", "150"],
                             cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = serve.stdout.readline()  # serve exits (closing stdout) if the server is not ready in time
        assert "tritonserver ready" in line, line + serve.stdout.read() + serve.stderr.read()
        got = json.loads(run(["trtspec", "generate", "--url", f"127.0.0.1:{ports.grpc}", "--json", "--k", "3",
                              "--model", "tensorrt_llm",
                              "--max-new-tokens", str(MAX_TOKENS), PROMPT], cwd=work, env=env, timeout=120).stdout)
        assert got["token_ids"] == plain_greedy() and got["text"].strip()
        serve.send_signal(signal.SIGINT)  # Ctrl-C: `trtspec serve` stops tritonserver and reports its exit
        out, err = serve.communicate(timeout=60)
        assert serve.returncode == 0 and "tritonserver exited (0)" in out, out + err
    finally:
        stop(serve)


@functools.cache
def plain_greedy() -> list[int]:
    """The embedded pair's greedy continuation of PROMPT, from this checkout's engine in this process (plain decoding:
    no method; speculation must reproduce it token for token)."""
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    engine = SpecEngine.from_pretrained(target="tiny")
    return engine.generate([PROMPT], SamplingParams(max_new_tokens=MAX_TOKENS), SpecParams(method="none"))[0].token_ids


def stop(proc: subprocess.Popen) -> None:
    """End `proc` and the processes it started (tritonserver runs in its own session): by PID only."""
    if proc.poll() is not None:
        return
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)  # `trtspec serve` forwards it to tritonserver and waits for it
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        for pid in [*children, proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)


def descendants(pid: int) -> list[int]:
    """The PIDs of `pid`'s children, grandchildren, ... (from /proc), deepest last."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            out += [child, *descendants(child)]
    return out
