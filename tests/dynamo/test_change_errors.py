"""A change of a `trtspec k8s` deployment planned from files a user may have edited (trtspec-k8s.json, the engine
configs) is refused with one line naming the file, the key and the fix (exit 2), never a traceback. In-process, no
Dynamo needed: `trtspec k8s` writes the files (well under a second)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.cli_checks import run_cli
from trtspec.contracts.control import SpeculationChange
from trtspec.dynamo import k8s
from trtspec.errors import ConfigError

CONFIG = {"name": "tiny-dt", "method": "draft_target", "target": "tiny", "draft": "tiny-draft", "max_draft_len": 4,
          "workflow": "pytorch", "trtllm": {"version": "1.2.1"},
          "engine": {"max_batch_size": 8, "max_input_len": 128, "max_seq_len": 256, "max_num_tokens": 1024}}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("k8s-errors")
    config = base / "tiny-dt.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    code, _, err = run_cli(["k8s", str(config), "--out", str(base / "k8s")])
    assert code == 0, err
    return base / "k8s"


@pytest.fixture
def out(rendered, tmp_path) -> Path:
    """A copy of what `trtspec k8s` wrote, for one test to edit."""
    return Path(shutil.copytree(rendered, tmp_path / "k8s"))


def _edit_record(out: Path, edit) -> None:
    path = out / k8s.RECORD_FILE
    record = json.loads(path.read_text())
    edit(record["render"])
    path.write_text(json.dumps(record))


def _refused(out: Path, *needles: str) -> ConfigError:
    """Both the reading of what it serves and the plan refuse, with one line; so does `set-k` (exit 2)."""
    from trtspec.dynamo.change import plan_k8s_change, served_k8s

    for call in (lambda: served_k8s(out, "m"), lambda: plan_k8s_change(out, SpeculationChange(2))):
        with pytest.raises(ConfigError) as info:
            call()
        assert "\n" not in info.value.message and all(n in info.value.message for n in needles), info.value.message
    code, _, err = run_cli(["set-k", "2", "--deployment", f"dynamo-k8s:{out}", "--dry-run"])
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("Error: ") and "Traceback" not in err, err
    assert all(n in lines[0] for n in needles), lines[0]
    return info.value


def test_the_unedited_deployment_plans(out):
    from trtspec.dynamo.change import plan_k8s_change

    assert plan_k8s_change(out, SpeculationChange(2)).files


@pytest.mark.parametrize("edit, needles", [
    (lambda r: r.update(replicas=2), ("trtspec-k8s.json render.'replicas' is not a parameter",)),
    (lambda r: r.pop("model_path"), ("trtspec-k8s.json render has no model_path",)),
    (lambda r: r.update(tp_size="2"), ("render.tp_size is '2', not int",)),
    (lambda r: r.update(tp_size=True), ("render.tp_size is True, not int",)),
    (lambda r: r.update(image=5), ("render.image is 5, not str or null",)),
    (lambda r: r.update(name=["a"]), ("render.name is ['a'], not str",)),
])
def test_record_keys_and_types_are_checked_against_renders_parameters(out, edit, needles):
    _edit_record(out, edit)
    error = _refused(out, k8s.RECORD_FILE, *needles)
    assert "trtspec k8s" in (error.hint or "")


def test_a_record_value_render_refuses_is_one_line_naming_the_record(out):
    _edit_record(out, lambda r: r.update(name="Not_A_Name"))
    from trtspec.dynamo.change import plan_k8s_change

    with pytest.raises(ConfigError, match=r"trtspec-k8s\.json's render parameters do not render: name='Not_A_Name'"):
        plan_k8s_change(out, SpeculationChange(2))


@pytest.mark.parametrize("value", ["4", -2, [4]])
def test_a_bad_max_draft_len_in_the_engine_config_names_the_file(out, value):
    path = out / "engine_configs" / "agg.yaml"
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    data = yaml.safe_load(text)
    data["speculative_config"]["max_draft_len"] = value
    path.write_text(header + yaml.safe_dump(data))
    _refused(out, f"{path}: speculative_config.max_draft_len")
