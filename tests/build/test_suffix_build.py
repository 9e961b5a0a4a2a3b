"""`trtspec build` with method suffix: refused for TensorRT-LLM with the reason (no target has suffix decoding),
accepted for the torch backend (the reference engine serves it)."""

from __future__ import annotations

import pytest

from tests.build.helpers import plan_of, spec_of
from trtspec.build.preflight import run_preflight
from trtspec.errors import ConfigError
from trtspec.targets import SUPPORTED_TARGETS, load_target


def suffix_spec(random_pair, **extra):
    return {"target": str(random_pair[0]), "method": "suffix",
            "engine": {"max_input_len": 64, "max_seq_len": 128}, **extra}


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_tensorrtllm_refuses_suffix_with_the_reason(random_pair, version):
    target = load_target(version)  # the facts behind the refusal: no build mode, decoding mode or LLM-API type
    words = [*target.trtllm_build["choices"]["--speculative_decoding_mode"], *target.decoding_modes,
             *target.llm_api.decoding_types]
    assert not [w for w in words if "suffix" in w.lower() or w == "SA"]
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**suffix_spec(random_pair, backend="tensorrtllm", trtllm={"version": version})),
                      dry_run=True)
    assert err.value.field == "method" and err.value.exit_code == 2
    assert "no suffix decoding" in err.value.message and "backend: torch" in err.value.hint


def test_torch_backend_builds_suffix(random_pair):
    resolved, plan = plan_of(**suffix_spec(random_pair, backend="torch", max_draft_len=16))
    assert resolved.max_draft_len == 16 and plan.method == "suffix"
    assert run_preflight(spec_of(**suffix_spec(random_pair, backend="torch"))).max_draft_len == 4  # the default k
