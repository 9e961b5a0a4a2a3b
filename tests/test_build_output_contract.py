"""The build-output contract (trtspec.contracts.build_output): what `trtspec build` writes is what deploy reads.

Each workflow's real CPU build writes its manifest through `write_manifest`; `read_manifest` gives back an equal
`Manifest`, writing that again gives the same bytes, and the deploy side (triton/build_output.read_build_output) reads
the same object's fields.
"""

from __future__ import annotations

import json

import pytest

from tests.build.helpers import write_config
from tests.cli_checks import run_cli
from trtspec.contracts.build_output import FORMAT, MANIFEST, Manifest, read_manifest, write_manifest
from trtspec.triton.build_output import read_build_output

ENVELOPE = {"dtype": "float32", "max_input_len": 64, "max_seq_len": 128}


@pytest.fixture(params=["pytorch", "engine"])
def build(request, random_pair, tmp_path):
    target, draft = random_pair
    version = {"pytorch": "1.2.1", "engine": "0.19.0"}[request.param]
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target",
                          max_draft_len=3, engine=ENVELOPE, trtllm={"version": version})
    out = tmp_path / "out"
    code, _, err = run_cli(["build", str(config), "--out", str(out)])
    assert code == {"pytorch": 0, "engine": 3}[request.param], err  # engine: trtllm-build steps pending on CPU
    return request.param, out


def test_write_read_round_trip(build, tmp_path):
    workflow, out = build
    written = (out / MANIFEST).read_bytes()
    manifest = read_manifest(out)
    assert manifest is not None and manifest.format == FORMAT and manifest.workflow == workflow
    assert manifest.to_dict() == json.loads(written) and list(manifest.to_dict()) == list(json.loads(written))
    assert Manifest.from_dict(manifest.to_dict()) == manifest
    again = tmp_path / "again"
    again.mkdir()
    write_manifest(again, manifest)
    assert (again / MANIFEST).read_bytes() == written  # byte for byte
    assert read_manifest(again) == manifest
    if workflow == "pytorch":
        assert manifest.engines == {} and manifest.llm_api and "trtllm-serve" in manifest.serve
    else:
        assert set(manifest.engines) == {"target", "draft"} and manifest.serve == {}
        assert {s["id"] for s in manifest.pending} == {"engine-target", "engine-draft"}
    output = read_build_output(out)  # the deploy side reads the same contract
    assert (output.workflow, output.method, output.engine.to_dict()) == (workflow, manifest.method, manifest.engine)


def test_unknown_keys_are_kept_and_other_formats_are_not_manifests(tmp_path):
    manifest = Manifest(backend="tensorrtllm", workflow="engine", method="ngram", extra={"error": "boom"})
    write_manifest(tmp_path, manifest)
    assert list(json.loads((tmp_path / MANIFEST).read_text()))[-1] == "error"
    assert read_manifest(tmp_path) == manifest
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest.to_dict(), "format": "trtspec-manifest/0"}))
    assert read_manifest(tmp_path) is None
    (tmp_path / MANIFEST).write_text("not json")
    assert read_manifest(tmp_path) is None and read_manifest(tmp_path / "missing") is None
