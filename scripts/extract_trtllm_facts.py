#!/usr/bin/env python3
"""Extract Triton model facts (tensor names, dtypes, dims, parameter keys, ensemble wiring) from NVIDIA's templates.

Dev tool, not shipped: it regenerates the `triton` section of `trtspec/targets/trtllm-<version>.json` from a local
copy of NVIDIA's sources, so the data files stay mechanical. It contains no NVIDIA code: it parses each
`config.pbtxt` with Triton's own ModelConfig protobuf (tritonclient) and scans the C++ backend sources with regular
expressions for the names they read.

Two kinds of input:

  # a bare git snapshot of triton-inference-server/tensorrtllm_backend at a tag (<= v0.19.0 hold the files)
  python scripts/extract_trtllm_facts.py triton --git /path/to/repo.git --rev v0.19.0 \
      --repo triton-inference-server/tensorrtllm_backend > /tmp/triton-0.19.0.json

  # a directory laid out like all_models/inflight_batcher_llm (+ optionally the backend's src/ directory)
  python scripts/extract_trtllm_facts.py triton --dir /tmp/ibl --src-dir /tmp/src --repo NVIDIA/TensorRT-LLM \
      --rev <commit> --models-path triton_backend/all_models/inflight_batcher_llm \
      --src-path triton_backend/inflight_batcher_llm/src

`--merge FILE` writes the section into an existing target data file (replacing its `triton` key) instead of stdout.
When that file has `templates.overlay.add` (names seen in later stored versions of the templates, recorded with their
commits), the overlay is applied to the extracted base and every added tensor is marked `"overlay": true`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

MODELS = ("preprocessing", "postprocessing", "ensemble", "tensorrt_llm", "tensorrt_llm_bls")
DEFAULT_MODELS_PATH = "all_models/inflight_batcher_llm"
DEFAULT_SRC_PATH = "inflight_batcher_llm/src"

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CONST = re.compile(r'static\s+constexpr\s+char\s+const\s*\*\s*(\w+)\s*=\s*"([^"]+)"\s*;')
_STR_CONST = re.compile(r'inline\s+static\s+std::string\s+const\s+(\w+)\s*=\s*"([^"]+)"\s*;')
_GET_PARAM = re.compile(r'GetParameter<[^()]*?>\(\s*"([^"]+)"\s*\)')
_DECODING_MODE = re.compile(r'decodingModeStr\s*==\s*"([^"]+)"')
_FIELD_NAME = re.compile(r'\bfieldName\s*=\s*"([^"]+)"')


# --- reading sources -------------------------------------------------------------------------------------------------


class GitSource:
    """Files of one revision of a bare git repository."""

    def __init__(self, git_dir: str, rev: str) -> None:
        self.git_dir, self.rev = git_dir, rev
        self.commit = self._git("rev-parse", f"{rev}^{{commit}}").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, *args], check=True, capture_output=True,
                              text=True).stdout

    def read(self, path: str) -> str | None:
        try:
            return self._git("show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError:
            return None

    def list(self, path: str) -> list[str]:
        out = self._git("ls-tree", "-r", "--name-only", self.commit, "--", path)
        return [line for line in out.splitlines() if line]


class DirSource:
    """Files under a local directory; `root_map` maps repository paths to local directories."""

    def __init__(self, root_map: dict[str, Path], rev: str) -> None:
        self.root_map, self.commit = root_map, rev

    def _local(self, path: str) -> Path | None:
        for prefix, local in self.root_map.items():
            if path == prefix or path.startswith(prefix + "/"):
                return local / path[len(prefix):].lstrip("/")
        return None

    def read(self, path: str) -> str | None:
        local = self._local(path)
        return local.read_text(encoding="utf-8") if local is not None and local.is_file() else None

    def list(self, path: str) -> list[str]:
        local = self._local(path)
        if local is None or not local.is_dir():
            return []
        return [f"{path}/{p.relative_to(local).as_posix()}" for p in sorted(local.rglob("*")) if p.is_file()]


# --- config.pbtxt ----------------------------------------------------------------------------------------------------


def _typed_stand_in(text: str, start: int) -> str:
    """A value of the right protobuf type for an unquoted `${name}` (so the template parses as a ModelConfig)."""
    line_start = text.rfind("\n", 0, start) + 1
    prefix = text[line_start:start]
    key = re.search(r"(\w+)\s*:\s*\[?\s*$", prefix)
    field = key.group(1) if key else ""
    if field == "data_type":
        return "TYPE_INVALID"
    if field == "decoupled":
        return "false"
    if field == "kind":
        return "KIND_CPU"
    return "0"


def _in_quotes(text: str, start: int) -> bool:
    line_start = text.rfind("\n", 0, start) + 1
    return text[line_start:start].count('"') % 2 == 1


def parse_template(text: str, *, source: str) -> dict:
    """Facts of one templated config.pbtxt: tensors, parameters, model settings and the placeholders used where."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    unquoted: list[dict[str, str]] = []
    tensor_placeholders: dict[str, str] = {}
    current_name = None
    for match in re.finditer(r'name:\s*"([^"]+)"|data_type:\s*\$\{(\w+)\}', text):
        if match.group(1) is not None:
            current_name = match.group(1)
        elif current_name is not None:
            tensor_placeholders[current_name] = match.group(2)
    pieces, last = [], 0
    for match in _PLACEHOLDER.finditer(text):
        if _in_quotes(text, match.start()):
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        field = re.search(r"(\w+)\s*:\s*\[?\s*$", text[line_start:match.start()])
        unquoted.append({"field": field.group(1) if field else "?", "placeholder": match.group(1)})
        pieces += [text[last:match.start()], _typed_stand_in(text, match.start())]
        last = match.end()
    parseable = "".join(pieces) + text[last:]
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(parseable, config)
    except text_format.ParseError as exc:
        raise SystemExit(f"{source}: does not parse as ModelConfig: {exc}") from None

    def tensor(t, kind: str) -> dict:
        item = {"name": t.name,
                "data_type": f"${{{tensor_placeholders[t.name]}}}" if t.name in tensor_placeholders
                else model_config_pb2.DataType.Name(t.data_type),
                "dims": list(t.dims)}
        if kind == "input":
            item["optional"] = bool(t.optional)
            if t.allow_ragged_batch:
                item["allow_ragged_batch"] = True
        if t.HasField("reshape"):
            item["reshape"] = list(t.reshape.shape)
        return item

    def placeholder_for(field: str) -> str | None:
        found = [u["placeholder"] for u in unquoted if u["field"] == field]
        return f"${{{found[0]}}}" if found else None

    facts: dict = {
        "name": config.name,
        "backend": config.backend or None,
        "platform": config.platform or None,
        "max_batch_size": placeholder_for("max_batch_size") or config.max_batch_size,
        "decoupled": (placeholder_for("decoupled") or config.model_transaction_policy.decoupled)
        if config.HasField("model_transaction_policy") else None,
        "dynamic_batching": json_format.MessageToDict(config.dynamic_batching, preserving_proto_field_name=True)
        if config.HasField("dynamic_batching") else None,
        "instance_group": [{"count": placeholder_for("count") or g.count,
                            "kind": model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind)}
                           for g in config.instance_group],
        "inputs": [tensor(t, "input") for t in config.input],
        "outputs": [tensor(t, "output") for t in config.output],
        "parameters": {key: value.string_value for key, value in sorted(config.parameters.items())},
        "placeholders": sorted(set(_PLACEHOLDER.findall(text))),
    }
    if facts["dynamic_batching"] is not None:
        for key, placeholder in (("max_queue_delay_microseconds", "max_queue_delay_microseconds"),
                                 ("preferred_batch_size", "preferred_batch_size")):
            ph = placeholder_for(placeholder)
            if ph:
                facts["dynamic_batching"][key] = ph
        queue = [u["placeholder"] for u in unquoted if u["field"] == "max_queue_size"]
        if queue:
            facts["dynamic_batching"].setdefault("default_queue_policy", {})["max_queue_size"] = f"${{{queue[0]}}}"
    if config.HasField("ensemble_scheduling"):
        facts["ensemble_steps"] = [{"model_name": s.model_name, "model_version": s.model_version,
                                    "input_map": dict(sorted(s.input_map.items())),
                                    "output_map": dict(sorted(s.output_map.items()))}
                                   for s in config.ensemble_scheduling.step]
    return facts


# --- C++ backend sources ---------------------------------------------------------------------------------------------


def _struct_body(text: str, struct: str) -> str:
    start = text.find(f"struct {struct}")
    if start < 0:
        return ""
    end = text.find("};", start)
    return text[start:end]


def scan_backend(src: dict[str, str]) -> dict:
    """Names the C++ `tensorrtllm` backend declares and uses: request inputs, response outputs, parameters."""
    utils_h = src.get("utils.h", "")
    bodies = "\n".join(text for name, text in src.items() if name != "utils.h")
    everything = "\n".join(src.values())

    def fields(struct: str) -> list[dict]:
        out = []
        for ident, name in _CONST.findall(_struct_body(utils_h, struct)):
            used = len(re.findall(rf"\b{struct}::{ident}\b", bodies)) + \
                len(re.findall(rf"\b{struct}::{ident}\b", utils_h.replace(_struct_body(utils_h, struct), "")))
            out.append({"name": name, "constant": f"{struct}::{ident}", "used": used > 0})
        return out

    inputs = fields("InputFieldsNames")
    outputs = fields("OutputFieldsNames")
    for ident, name in _STR_CONST.findall(utils_h):
        if not name.islower() or " " in name:
            continue
        used = len(re.findall(rf"\b{ident}\b", everything)) > 1
        if ident.endswith("InputTensorName"):
            inputs.append({"name": name, "constant": ident, "used": used})
        elif ident.endswith("ParameterName"):
            inputs.append({"name": name, "constant": ident, "used": used, "kind": "request_parameter"})
    params = sorted(set(_GET_PARAM.findall(everything)) | set(_FIELD_NAME.findall(everything)))
    modes = list(dict.fromkeys(_DECODING_MODE.findall(everything)))
    return {"inputs": inputs, "outputs": outputs, "parameters": params, "decoding_modes": modes}


def python_references(files: dict[str, str], names: list[str]) -> dict[str, bool]:
    """Whether each tensor name appears as a string literal in a Python model's sources."""
    blob = "\n".join(files.values())
    return {n: bool(re.search(rf"""['"]{re.escape(n)}['"]""", blob)) for n in names}


# --- driver ----------------------------------------------------------------------------------------------------------


def extract(source, *, repo: str, tag: str | None, models_path: str, src_path: str | None) -> dict:
    ref = {"repo": repo, **({"tag": tag} if tag else {}), "commit": source.commit}
    models = {}
    for model in MODELS:
        path = f"{models_path}/{model}/config.pbtxt"
        text = source.read(path)
        if text is None:
            continue
        facts = parse_template(text, source=path)
        facts["source"] = {**ref, "path": path}
        py_files = {p: source.read(p) or "" for p in source.list(f"{models_path}/{model}/1") if p.endswith(".py")}
        if py_files and model != "tensorrt_llm":
            refs = python_references(py_files, [t["name"] for t in facts["inputs"] + facts["outputs"]])
            for t in facts["inputs"] + facts["outputs"]:
                t["referenced_in_model_py"] = refs[t["name"]]
            facts["python_sources"] = sorted(py_files)
        models[model] = facts
    section: dict = {"source": {**ref, "path": models_path}, "models": models}
    if src_path:
        names = ("utils.h", "utils.cc", "model_instance_state.cc", "model_instance_state.h", "model_state.cc",
                 "model_state.h")
        src = {n: source.read(f"{src_path}/{n}") for n in names}
        src = {n: t for n, t in src.items() if t is not None}
        if src:
            backend = scan_backend(src)
            backend["source"] = {**ref, "path": src_path, "files": sorted(src)}
            section["backend"] = backend
            declared = {t["name"] for t in models.get("tensorrt_llm", {}).get("inputs", [])}
            read = {i["name"] for i in backend["inputs"] if i["used"]}
            for t in models.get("tensorrt_llm", {}).get("inputs", []):
                t["read_by_backend"] = t["name"] in read
            written = {o["name"] for o in backend["outputs"] if o["used"]}
            for t in models.get("tensorrt_llm", {}).get("outputs", []):
                t["written_by_backend"] = t["name"] in written
            backend["read_but_not_declared"] = sorted(read - declared)
    return section


def apply_overlay(section: dict, overlay: dict) -> dict:
    """Add the tensors/backend names of `overlay` (see the module docstring) to an extracted section."""
    for model, changes in overlay.get("models", {}).items():
        facts = section["models"][model]
        for kind in ("inputs", "outputs"):
            have = {t["name"] for t in facts[kind]}
            for tensor in changes.get(f"add_{kind}", []):
                if tensor["name"] not in have:
                    facts[kind].append({**tensor, "overlay": True})
        for name, dtype in changes.get("set_data_type", {}).items():
            for tensor in facts["inputs"] + facts["outputs"]:
                if tensor["name"] == name:
                    tensor["data_type"], tensor["overlay"] = dtype, True
            placeholder = dtype[2:-1] if dtype.startswith("${") else None
            if placeholder and placeholder not in facts["placeholders"]:
                facts["placeholders"] = sorted([*facts["placeholders"], placeholder])
    backend = section.get("backend")
    if backend is not None:
        for kind in ("inputs", "outputs"):
            have = {t["name"] for t in backend[kind]}
            for name in overlay.get("backend", {}).get(f"add_{kind}", []):
                if name not in have:
                    backend[kind].append({"name": name, "used": True, "overlay": True})
        read = {i["name"] for i in backend["inputs"] if i["used"]}
        written = {o["name"] for o in backend["outputs"] if o["used"]}
        trt = section["models"].get("tensorrt_llm")
        if trt is not None:
            for t in trt["inputs"]:
                t["read_by_backend"] = t["name"] in read
            for t in trt["outputs"]:
                t["written_by_backend"] = t["name"] in written
            backend["read_but_not_declared"] = sorted(read - {t["name"] for t in trt["inputs"]})
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("triton", help="Triton model facts from all_models/inflight_batcher_llm")
    t.add_argument("--git", help="bare git directory")
    t.add_argument("--dir", help="local directory laid out like all_models/inflight_batcher_llm")
    t.add_argument("--src-dir", help="local directory with the C++ backend's src/ files (with --dir)")
    t.add_argument("--rev", required=True, help="git tag/commit (with --git), or the commit the files come from")
    t.add_argument("--repo", required=True, help="owner/name recorded as the source")
    t.add_argument("--models-path", default=DEFAULT_MODELS_PATH)
    t.add_argument("--src-path", default=DEFAULT_SRC_PATH)
    t.add_argument("--no-src", action="store_true", help="skip the C++ backend scan")
    t.add_argument("--merge", help="target data file to update in place (its `triton` key)")
    args = parser.parse_args(argv)

    if bool(args.git) == bool(args.dir):
        parser.error("give exactly one of --git or --dir")
    if args.git:
        source = GitSource(args.git, args.rev)
        tag = args.rev if not re.fullmatch(r"[0-9a-f]{7,40}", args.rev) else None
    else:
        roots = {args.models_path: Path(args.dir)}
        if args.src_dir:
            roots[args.src_path] = Path(args.src_dir)
        source, tag = DirSource(roots, args.rev), None
    section = extract(source, repo=args.repo, tag=tag, models_path=args.models_path,
                      src_path=None if args.no_src else args.src_path)
    if args.merge:
        path = Path(args.merge)
        data = json.loads(path.read_text(encoding="utf-8"))
        overlay = data.get("templates", {}).get("overlay", {}).get("add")
        if overlay:
            section = apply_overlay(section, overlay)
        data["triton"] = {**data.get("triton", {}), **section}
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    else:
        json.dump(section, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
