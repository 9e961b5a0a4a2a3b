"""Hybrid drafting (methods suffix_draft, suffix_eagle3) in builds: a torch bundle runs them (the EAGLE-3 drafter from
an `eagle:` section); every TensorRT-LLM target refuses them with the reason and the nearest choice, and the facts
behind the reason hold (sa_config exists on 1.3.0rc29's Eagle3 / MTP / PARD configs, never on DraftTarget)."""

from __future__ import annotations

import pytest

from tests.build.helpers import plan_of, spec_of
from trtspec.build.llm_api import LlmApiRefusal, Speculation, llm_api_options
from trtspec.build.preflight import run_preflight
from trtspec.errors import ConfigError
from trtspec.targets import SUPPORTED_TARGETS
from trtspec.targets.llm_api import llm_api_facts

RC29 = "1.3.0rc29"


def hybrid_spec(random_pair, method: str, **extra):
    drafter = {"draft": str(random_pair[1])} if method == "suffix_draft" else {"eagle": {"model": "tiny-eagle"}}
    return {"target": str(random_pair[0]), "method": method, "engine": {"max_input_len": 64, "max_seq_len": 128},
            **drafter, **extra}


def test_the_facts_behind_the_refusals():
    facts = llm_api_facts(RC29)
    with_sa = {kind for kind in facts.decoding_types if "sa_config" in facts.fields_of(kind)}
    assert with_sa == {"Eagle3", "MTP", "PARD"}  # SA rides on these; DraftTarget has none


@pytest.mark.parametrize("method", ["suffix_draft", "suffix_eagle3"])
def test_torch_backend_builds_the_hybrid(random_pair, method):
    _, plan = plan_of(**hybrid_spec(random_pair, method, backend="torch", max_draft_len=16))
    assert plan.method == method


@pytest.mark.parametrize("method", ["suffix_draft", "suffix_eagle3"])
@pytest.mark.parametrize("workflow", ["pytorch", "engine"])
@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_tensorrt_llm_targets_refuse_the_hybrid_by_name(random_pair, method, workflow, version):
    spec = spec_of(**hybrid_spec(random_pair, method, backend="tensorrtllm", workflow=workflow,
                                 trtllm={"version": version}))
    with pytest.raises(ConfigError) as err:
        run_preflight(spec, dry_run=True)
    assert err.value.field == "method" and err.value.exit_code == 2 and "\n" not in err.value.message
    assert ("not on DraftTarget" if method == "suffix_draft" else "sa_config") in err.value.message
    assert "backend: torch" in f"{err.value.message} {err.value.hint}"


@pytest.mark.parametrize(("method", "nearest"), [("suffix_draft", "draft_target"), ("suffix_eagle3", "eagle.eagle3")])
def test_rc29_llm_api_refuses_the_hybrid_naming_the_nearest(method, nearest):
    """What `trtspec k8s` (Dynamo 1.6.1, TensorRT-LLM 1.3.0rc29) renders from: no silent plain EAGLE-3 or SA."""
    with pytest.raises(LlmApiRefusal) as err:
        llm_api_options(Speculation(method, 4, "/m/target"), llm_api_facts(RC29), {})
    assert err.value.exit_code == 2 and nearest in err.value.message and "backend: torch" in err.value.hint
