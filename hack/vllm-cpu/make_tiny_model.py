"""Writes a tiny Llama model directory for the CPU vLLM engine, downloading nothing.

Run with the engine venv's python (it needs `tokenizers`, a vLLM dependency):

    <venv>/bin/python hack/vllm-cpu/make_tiny_model.py --out <cache>/models/tiny-llama

It writes config.json, generation_config.json, tokenizer.json, tokenizer_config.json (with a
chat template) and special_tokens_map.json. No weights: the engine serves it with
`--load-format dummy` (random weights), so the text is noise but every token is real work.
The tokenizer is a byte-level BPE trained here on the repo's Markdown and the stdlib's
sources. Idempotent: a stamp naming the shape is written last; a matching stamp skips the work.
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from pathlib import Path
from typing import Any

__all__ = ["CONFIG", "main"]

REPO = Path(__file__).resolve().parents[2]
VOCAB = 4096
#: The architecture (hidden 256, 4 layers, 4 heads, 2 KV heads of 64): 2 x 4 x 2 x 64 x 2
#: bytes = 2 KiB of KV cache per token in bfloat16.
CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
    "use_cache": True,
}
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "<|{{ m['role'] }}|>\n"
    "{{ m['content'] if m['content'] is string"
    " else m['content'] | map(attribute='text') | join('') }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
STAMP = ".tiny-llama"


def stamp_text() -> str:
    """What the stamp says: a change of the shape, vocabulary or template rebuilds."""
    shape = json.dumps({"config": CONFIG, "vocab": VOCAB, "chat": CHAT_TEMPLATE}, sort_keys=True)
    return f"tiny-llama {shape}\n"


def corpus() -> list[str]:
    """The text the tokenizer learns from: the repo's Markdown, then stdlib sources."""
    files = sorted(REPO.glob("*.md")) + sorted((REPO / "docs").glob("**/*.md"))
    files += sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:400]
    return [str(f) for f in files if f.is_file()]


def write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


def build(out: Path) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    files = corpus()
    tokenizer.train(files, trainer)
    bos, eos, pad = (tokenizer.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))
    # <s> first when add_special_tokens=True, as Llama tokenizers do.
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    tokenizer.save(str(out / "tokenizer.json"))
    tokens = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **tokens,
            "add_bos_token": True,
            "add_eos_token": False,
            "model_max_length": CONFIG["max_position_embeddings"],
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    write_json(out / "special_tokens_map.json", tokens)
    ids = {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}
    write_json(out / "config.json", {**CONFIG, "vocab_size": tokenizer.get_vocab_size(), **ids})
    write_json(out / "generation_config.json", ids)
    return f"vocab {tokenizer.get_vocab_size()} trained on {len(files)} local files"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the model directory")
    out: Path = parser.parse_args(argv).out
    stamp = out / STAMP
    if (
        stamp.is_file()
        and stamp.read_text() == stamp_text()
        and all((out / f).is_file() for f in FILES)
    ):
        print(f"tiny model: up to date in {out}", file=sys.stderr)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    summary = build(out)
    stamp.write_text(stamp_text())
    print(f"tiny model: wrote {out} ({summary})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
