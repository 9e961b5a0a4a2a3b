"""How trtspec writes Kubernetes manifests and Dynamo's engine configs as text (k8s.py renders them): YAML by the
serializer only, strings quoted wherever a YAML 1.1 reader could take them for anything but that string, and
comments that a value can never end.
"""

from __future__ import annotations

import re
from typing import Any

# Where YAML 1.1 readers (PyYAML, Go's yaml.v2 in kubectl and the operator) see a line break.
LINE_BREAKS = frozenset("\n\r\x85\u2028\u2029")


def inline(value: object) -> str:
    """`value` for a comment or a note: as it is when it is printable text on one line, else escaped (its ASCII
    repr), so that it can never end the comment it is in."""
    text = str(value)
    return text if text.isprintable() and not LINE_BREAKS.intersection(text) else ascii(text)


def comment(text: str) -> str:
    """`text` as comment lines (YAML and shell): each of its lines starts with '# ', so a line break in it continues
    the comment instead of ending it."""
    return "".join(f"# {line}\n" for line in text.splitlines() or [""])


_PLAIN = re.compile(r"(?:--)?[A-Za-z_/][A-Za-z0-9_./-]*")  # strings written unquoted (when PyYAML agrees)
_YAML11_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def _dumper() -> type:
    """PyYAML's SafeDumper writing block style, a multi-line string as a literal `|` block (the engine configs in the
    ConfigMap) when PyYAML can, and every other string unquoted only when it is a word no YAML 1.1 reader takes for
    anything else (Go's yaml.v2, which kubectl and Dynamo's operator use, reads y / n as booleans and 1e3 as a
    number where PyYAML reads strings); the rest double-quoted, with escapes."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        if "\n" in value:
            style = "|"
        elif _PLAIN.fullmatch(value) and value.lower() not in _YAML11_WORDS:
            style = None
        else:
            style = '"'
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def yaml_text(data: Any) -> str:
    """One YAML document, written by the serializer only (see `_dumper`)."""
    import yaml

    return yaml.dump(data, Dumper=_dumper(), sort_keys=False, default_flow_style=False, width=120)


def yaml_documents(documents: list[Any]) -> str:
    """YAML documents separated by `---`, written by the serializer only (see `_dumper`)."""
    import yaml

    return yaml.dump_all(documents, Dumper=_dumper(), sort_keys=False, default_flow_style=False, width=120)
