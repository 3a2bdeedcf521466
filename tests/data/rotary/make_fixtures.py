"""Write the tiny rotary-attention ONNX models tests/test_onnx_rotary.py imports.

Run once, offline, with torch and transformers installed (neither is a dependency of mapper):

    python tests/data/rotary/make_fixtures.py [OUT_DIR [FAMILY ...]]

Each model is built from a config with random weights (nothing is downloaded): Llama
(``LlamaForCausalLM``), Qwen2 (``Qwen2ForCausalLM``: biases on the Q, K and V projections) and
Mistral (``MistralForCausalLM`` with a sliding window shorter than the exported sequence) and
``mistral4k`` (Mistral with a 4,096-token window, longer than any sequence whose mask mapper
folds; written with torch 2.13 CPU and transformers 5.25), all
with eager attention and grouped-query heads (4 query heads, 2 key-value heads of 16), 2 layers, width 64,
16-bit weights. Each is exported twice: by torch's default (dynamo) exporter, which writes
``NAME.onnx`` and its weights in ``NAME.onnx.data``, and by the TorchScript exporter
(``dynamo=False``), one file; ``llama_sdpa_dynamo`` has transformers' default attention
(``scaled_dot_product_attention``). Inputs are the token ids ``[batch, seq]`` (both dimensions dynamic);
``llama_decode`` also takes a KV cache (``past_key_i``, ``past_value_i`` ``[batch, 2, past, 16]``)
and returns it extended.
"""

from __future__ import annotations

import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.cache_utils import DynamicCache

SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 512,
         "tie_word_embeddings": False, "attn_implementation": "eager"}
FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM, {"rope_theta": 500000.0}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {"rope_theta": 1000000.0, "use_sliding_window": False}),
    "mistral": (MistralConfig, MistralForCausalLM, {"rope_theta": 10000.0, "sliding_window": 8}),
    "mistral4k": (MistralConfig, MistralForCausalLM, {"rope_theta": 10000.0, "sliding_window": 4096}),
}
BATCH, SEQ = 2, 16


class Logits(torch.nn.Module):
    """The model's logits from its token ids only (no mask: every position attends causally; an
    empty cache, as generation's first step passes, keeps the packed-sequence check out of the trace)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, past_key_values=DynamicCache(config=self.model.config),
                          use_cache=True).logits


class Decode(torch.nn.Module):
    """One decode step: the new tokens' logits and the cache extended by their keys and values."""

    def __init__(self, model: torch.nn.Module, layers: int) -> None:
        super().__init__()
        self.model = model
        self.layers = layers

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cache = DynamicCache(config=self.model.config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def build(family: str, attention: str = "eager") -> torch.nn.Module:
    config_class, model_class, extra = FAMILIES[family]
    torch.manual_seed(0)
    model = model_class(config_class(**{**SIZES, "attn_implementation": attention}, **extra))
    return model.to(torch.float16).eval()


def export(module: torch.nn.Module, args: tuple, path: str, dynamo: bool, names: list[str],
           outputs: list[str], dynamic: dict) -> None:
    if dynamo:
        shapes = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}}
        torch.onnx.export(module, args, path, dynamo=True, input_names=names, output_names=outputs,
                          dynamic_shapes=(shapes["input_ids"],) if len(args) == 1 else None, optimize=True,
                          external_data=True)
    else:
        torch.onnx.export(module, args, path, dynamo=False, input_names=names, output_names=outputs,
                          dynamic_axes=dynamic, opset_version=17)


def main(out: str, only: list[str]) -> None:
    """Write every fixture, or only the token-ids exports of the families in ``only``."""
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    ids = torch.randint(0, SIZES["vocab_size"], (BATCH, SEQ))
    for family in only or FAMILIES:
        model = build(family)
        for dynamo in (True, False):
            name = os.path.join(out, f"{family}_{'dynamo' if dynamo else 'legacy'}.onnx")
            with torch.no_grad():
                export(Logits(model), (ids,), name, dynamo, ["input_ids"], ["logits"],
                       {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
            print("wrote", name)
    if only:
        return
    # transformers' default attention, torch's scaled_dot_product_attention (the TorchScript
    # exporter cannot export it with grouped-query heads)
    name = os.path.join(out, "llama_sdpa_dynamo.onnx")
    with torch.no_grad():
        export(Logits(build("llama", "sdpa")), (ids,), name, True, ["input_ids"], ["logits"], {})
    print("wrote", name)
    model = build("llama")
    layers = SIZES["num_hidden_layers"]
    past = []
    names = ["input_ids"]
    outputs = ["logits"]
    for i in range(layers):
        past += [torch.randn(BATCH, 2, 12, 16, dtype=torch.float16) for _ in range(2)]
        names += [f"past_key_{i}", f"past_value_{i}"]
        outputs += [f"present_key_{i}", f"present_value_{i}"]
    dynamic = {n: {0: "batch", 2: "past"} for n in names[1:]}
    dynamic["input_ids"] = {0: "batch", 1: "seq"}
    name = os.path.join(out, "llama_decode_legacy.onnx")
    with torch.no_grad():
        export(Decode(model, layers), (ids[:, :1], *past), name, False, names, outputs, dynamic)
    print("wrote", name)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)), sys.argv[2:])
