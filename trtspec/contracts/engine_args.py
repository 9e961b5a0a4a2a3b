"""The engine configuration as a process's command line: `--<parameter> VALUE` for each text parameter of
`EngineConfig` (`to_parameters` / `from_parameters`; `eagle_topk` is `--eagle-topk`).

`engine_argv` is what a launcher passes (`trtspec serve --dynamo` to each Dynamo worker, `serve --trtllm-serve` to its
server process); `add_engine_arguments` and `engine_from_args` are how those processes parse it back, so errors name
the flag (`flag`). The one definition of that form, for every process that takes an engine configuration as arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from trtspec.contracts.engine import EngineConfig, spelled

DEST_PREFIX = "engine_"  # an engine parameter's argparse destination: engine_<parameter>


def flag(name: str) -> str:
    """The command-line flag of a parameter, or of a ConfigError's field (`parameter eagle_topk` -> `--eagle-topk`)."""
    return "--" + name.removeprefix("parameter ").replace("_", "-")


def engine_argv(config: EngineConfig) -> list[str]:
    """`--<parameter> VALUE` for each parameter that differs from the defaults (the target always)."""
    defaults = EngineConfig(target=config.target).to_parameters()
    return [arg for key, value in config.to_parameters().items() if key == "target" or value != defaults.get(key)
            for arg in (flag(key), value)]


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The argument group of every EngineConfig parameter (`--target` required), read back by `engine_from_args`."""
    group = parser.add_argument_group("engine (EngineConfig parameters)")
    for name in EngineConfig.parameter_names():
        group.add_argument(flag(name), dest=DEST_PREFIX + name, metavar=name.upper(), required=name == "target")


def engine_from_args(args: argparse.Namespace | Mapping[str, Any]) -> EngineConfig:
    """The EngineConfig of parsed arguments (a Namespace, or its `vars`): the parameters given, the defaults for the
    rest; a ConfigError names the flag."""
    values = vars(args) if isinstance(args, argparse.Namespace) else args
    given = {key.removeprefix(DEST_PREFIX): value for key, value in values.items()
             if key.startswith(DEST_PREFIX) and value is not None}
    with spelled(flag):
        return EngineConfig.from_parameters(given)
