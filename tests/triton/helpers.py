"""Helpers for the Triton tests: a small HF tokenizer and build outputs with manifests."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\nprint(os.getcwd())\n",
    "The quick brown fox jumps over the lazy dog.",
    "for i in range(10):\n    print(i * i)\n",
]


def make_tokenizer(path: Path) -> Path:
    """A byte-level BPE tokenizer (vocab <= 300) saved as a Hugging Face fast tokenizer with <s>/</s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    return path


def write_manifest(build_dir: Path, manifest: dict) -> Path:
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "trtspec-manifest.json").write_text(json.dumps(manifest))
    return build_dir
