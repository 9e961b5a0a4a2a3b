"""Helpers for the Triton tests: a small HF tokenizer and build outputs with manifests."""

from __future__ import annotations

import json
from pathlib import Path

from trtspec import choices
from trtspec.methods import resolve

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 ():,.+=\n_"


def make_tokenizer(path: Path) -> Path:
    """A character-level Hugging Face fast tokenizer with <s>/</s>/<unk>: 50 entries, so it fits the random test
    models (vocab 64). Encoding adds <s>; decoding concatenates characters."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<s>", "</s>", "<unk>", *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)
    return path


def with_tokenizer(model_dir: Path, tokenizer_dir: Path, dest: Path) -> Path:
    """`dest`: the checkpoint `model_dir` plus the tokenizer files (symlinks)."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in [*Path(model_dir).iterdir(), *Path(tokenizer_dir).iterdir()]:
        if not (dest / src.name).exists():
            (dest / src.name).symlink_to(src.resolve())
    return dest


def build_example(name: str, out: Path, **overrides: object) -> Path:
    """`trtspec build build_configs/<name>.yaml` into `out` (in-process), e.g. the tiny-torch or tiny-suffix bundle;
    `overrides` replace top-level sections of the example (e.g. backend="torch")."""
    from trtspec.build.execute import execute
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_build_spec

    spec = load_build_spec(Path(__file__).resolve().parents[2] / "build_configs" / f"{name}.yaml",
                           overrides={**overrides, "output": str(out)})
    resolved = run_preflight(spec)
    execute(plan_build(resolved), resolved, out, quiet=True)
    return out


def write_manifest(build_dir: Path, manifest: dict) -> Path:
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "trtspec-manifest.json").write_text(json.dumps(manifest))
    return build_dir


def torch_bundle(path: Path, target: Path, draft: Path | None, *, method: str = "draft_target", k: int = 4) -> Path:
    """A torch-path bundle as `trtspec build --backend torch` writes it (model files linked, not copied)."""
    path.mkdir(parents=True, exist_ok=True)
    for role, src in (("target", target), ("draft", draft)):
        if src is not None:
            with_tokenizer(src, src, path / role)
    (path / "trtspec-bundle.json").write_text(json.dumps({
        "format": "trtspec-bundle/1", "method": method, "max_draft_len": k, "target": "target",
        "draft": "draft" if draft is not None else None, "medusa": None, "choices": None, "lookahead": None,
        "dtype": "float32", "max_batch_size": 8, "max_seq_len": 512}))
    return write_manifest(path, {"format": "trtspec-manifest/1", "backend": "torch", "method": method,
                                 "config": {"target": str(target), "engine": {"max_input_len": 256}}})


def trt_manifest(method: str, target: Path, *, max_draft_len: int = 0, draft: bool = False, tp: int = 1,
                 lookahead: tuple[int, int, int] | None = None, tree: list[list[int]] | None = None,
                 heads: int | None = None) -> dict:
    """A manifest in trtspec.build's format (trtspec-manifest/1) for a TensorRT-LLM build whose engines are pending."""
    mode = resolve(method).trtllm_build_mode
    flags = f" --speculative_decoding_mode {mode}" if mode else ""
    flags += f" --max_draft_len {max_draft_len}" if max_draft_len else ""
    roles = ["target", "draft"] if draft else ["target"]
    return {
        "format": "trtspec-manifest/1", "backend": "tensorrtllm", "method": method,
        "config": {"target": str(target), "engine": {"tp_size": tp, "pp_size": 1, "max_batch_size": 4,
                                                     "max_input_len": 128, "max_seq_len": 256}},
        "derived": {"max_draft_len": max_draft_len,
                    "choices": {"json": choices.to_json(tree), "triton": choices.to_triton(tree)} if tree else None,
                    "lookahead": dict(zip(("window", "ngram", "verification_set"), lookahead, strict=True)) if lookahead else None,
                    "kv_cache": {r: {"max_tokens_in_paged_kv_cache": 2048, "kv_cache_free_gpu_mem_fraction": None}
                                 for r in roles},
                    "medusa_heads": {"num_heads": heads} if heads else None},
        "engines": {r: f"engines/{r}" for r in roles},
        "steps": [{"id": "engine-target", "command": f"trtllm-build --checkpoint_dir checkpoints/target{flags}"}],
    }  # fmt: skip


# The standard deployment of the embedded pair (tests/conftest.py `standard_server`): torch flavour, decoupled,
# Triton max batch STANDARD_BATCH, and these engine settings.
STANDARD_BATCH = 4
STANDARD_ENGINE = {"max_k": 6, "default_k": 3, "max_input_len": 64, "max_output_len": 200}


def counting_model(name: str, *, decoupled: bool, version: str | None = None, **params: object) -> dict:
    """The counting test double (tests/triton/doubles/counting_lm) as model `name`: {relative path: RepoFile}.

    Its inputs and outputs are the tensorrt_llm model's of TensorRT-LLM `version` (default: the default target), as
    trtspec renders them (so `random_seed`/`min_length` are spelled as that release does); `params` become config
    parameters (role, delay_s, cancel_log, input_log)."""
    from trtspec.targets import DEFAULT_TARGET, load_target
    from trtspec.triton import contract
    from trtspec.triton.render import RepoFile

    doubles = Path(__file__).parent / "doubles" / "counting_lm"
    decls = contract.model_decls(load_target(version or DEFAULT_TARGET), "tensorrt_llm", {"logits_datatype": "TYPE_FP32"})
    blocks = contract.decls_block(decls)
    config = (doubles / "config.pbtxt").read_text() + f"{blocks['inputs']}\n{blocks['outputs']}\n"
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    lines = "".join(f'parameters: {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    return {f"{name}/config.pbtxt": RepoFile(text=f'name: "{name}"\n{policy}{config}\n{lines}'),
            f"{name}/1/model.py": RepoFile(copy_from=doubles / "1" / "model.py")}


def target_greedy(max_tokens: int):
    """The embedded target alone, plain decoding, as TensorRT-LLM answers a prompt (the end token ends the request,
    unreported): a function prompt -> token ids."""
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SpecParams, trtllm_sampling_params

    engine = SpecEngine.from_pretrained(target="tiny")
    eos = engine.tokenizer.eos_token_id

    def greedy(prompt: str) -> list[int]:
        (out,) = engine.generate([prompt], sampling=trtllm_sampling_params(max_new_tokens=max_tokens, end_id=eos),
                                 spec=SpecParams(method="none", k=0))
        return out.token_ids[:-1] if out.token_ids and out.token_ids[-1] == eos else out.token_ids

    return greedy
