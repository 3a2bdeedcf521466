"""The ONNX corpus of tests/test_onnx_corpus.py: tiny real models (random weights from configs,
nothing downloaded) exported by torch 2.13 with both exporters (``dynamo=True``: NAME.onnx plus
NAME.onnx.data; ``dynamo=False``: one file, shape arithmetic unfolded, dynamic axes), and each
model's FLOPs by torch.utils.flop_counter.FlopCounterMode in flops.json.

Run offline with torch 2.13 (CPU) and transformers installed: python make_corpus.py OUT_FOLDER
"""
import json
import os
import sys
import warnings

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode
from transformers import (
    BartConfig,
    BartModel,
    BertConfig,
    BertModel,
    ConvNextConfig,
    ConvNextModel,
    GPT2Config,
    GPT2Model,
    T5Config,
    T5EncoderModel,
    ViTConfig,
    ViTModel,
)

warnings.filterwarnings("ignore")
out = sys.argv[1]
torch.manual_seed(0)
B, S = 2, 16

def flops(model, args):
    """FlopCounterMode's count, with SDPA on its math backend (matmul, softmax, matmul), which the
    counter sees (it does not count the fused CPU kernel). Same FLOPs either way. It does not count
    LSTM either: tests/test_onnx_corpus.py checks that against the formula."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(*args)
    return fc.get_total_flops()

class CNN(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        s.b1 = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, 1, 1), nn.BatchNorm2d(16))
        s.head = nn.Linear(16, 10)
    def forward(s, x):
        h = s.stem(x)
        h = torch.relu(h + s.b1(h))
        return s.head(h.mean(dim=(2, 3)))

class Mixer(nn.Module):
    def __init__(s, p=16, d=32):
        super().__init__()
        s.patch = nn.Conv2d(3, d, 4, 4)
        s.n1 = nn.LayerNorm(d)
        s.tok = nn.Sequential(nn.Linear(p, 32), nn.GELU(), nn.Linear(32, p))
        s.n2 = nn.LayerNorm(d)
        s.ch = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))
        s.head = nn.Linear(d, 10)
    def forward(s, x):
        h = s.patch(x).flatten(2).transpose(1, 2)
        h = h + s.tok(s.n1(h).transpose(1, 2)).transpose(1, 2)
        h = h + s.ch(s.n2(h))
        return s.head(h.mean(1))

class RNN(nn.Module):
    def __init__(s, cell):
        super().__init__()
        s.rnn = cell(32, 48, num_layers=1, batch_first=True)
        s.fc = nn.Linear(48, 10)
    def forward(s, x):
        y, _ = s.rnn(x)
        return s.fc(y[:, -1])

class HF(nn.Module):
    def __init__(s, m, key):
        super().__init__()
        s.m, s.key = m, key
    def forward(s, x):
        return s.m(**{s.key: x}).last_hidden_state

def models():
    ids = torch.randint(0, 256, (B, S))
    bert = BertModel(BertConfig(vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=32)).eval()
    yield "bert", HF(bert, "input_ids"), (ids,), {"input_ids": {0: "batch", 1: "seq"}}
    gpt = GPT2Model(GPT2Config(vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=32, use_cache=False)).eval()
    yield "gpt2", HF(gpt, "input_ids"), (ids,), {"input_ids": {0: "batch", 1: "seq"}}
    vit = ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64)).eval()
    yield "vit", HF(vit, "pixel_values"), (torch.randn(B, 3, 32, 32),), None
    yield "cnn", CNN().eval(), (torch.randn(B, 3, 32, 32),), {"x": {0: "batch"}}
    yield "mixer", Mixer().eval(), (torch.randn(B, 3, 16, 16),), None
    yield "lstm", RNN(nn.LSTM).eval(), (torch.randn(B, S, 32),), None
    yield "gru", RNN(nn.GRU).eval(), (torch.randn(B, S, 32),), None
    bart = BartModel(BartConfig(vocab_size=256, d_model=32, encoder_layers=2, decoder_layers=1,
                                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                decoder_ffn_dim=64, max_position_embeddings=32)).get_encoder().eval()
    yield "bart", HF(bart, "input_ids"), (ids,), {"input_ids": {0: "batch", 1: "seq"}}
    t5 = T5EncoderModel(T5Config(vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)).eval()
    yield "t5", HF(t5, "input_ids"), (ids,), {"input_ids": {0: "batch", 1: "seq"}}
    convnext = ConvNextModel(ConvNextConfig(num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                                            image_size=32)).eval()
    yield "convnext", HF(convnext, "pixel_values"), (torch.randn(B, 3, 32, 32),), {"pixel_values": {0: "batch"}}

counts = {}
for name, m, args, dyn in models():
    counts[name] = flops(m, args)
    for exporter in ("dynamo", "legacy"):
        path = os.path.join(out, f"{name}_{exporter}.onnx")
        try:
            if exporter == "legacy":  # GPT-2's fails: aten::diff has no ONNX form in that exporter
                names = {"bert": ["input_ids"], "gpt2": ["input_ids"], "bart": ["input_ids"], "t5": ["input_ids"],
                         "convnext": ["pixel_values"]}.get(name, ["x"])
                torch.onnx.export(m, args, path, dynamo=False, input_names=names, dynamic_axes=dyn)
            else:
                torch.onnx.export(m, args, path, dynamo=True)
            print(name, exporter, "ok", os.path.getsize(path))
        except Exception as e:
            print(name, exporter, "FAILED", type(e).__name__, str(e)[:300])
json.dump(counts, open(os.path.join(out, "flops.json"), "w"), indent=1, sort_keys=True)
print(counts)

# BERT-large's shapes (Devlin et al., NAACL 2019: H 1024, 16 heads, FFN 4096) for 4 of its 24 layers,
# at examples/bert_large.tg's batch of 128 sequences of 384 tokens in f16, exported with its weights
# deleted afterwards (weightless/): mapping needs none of them
large = BertModel(BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=4, num_attention_heads=16,
                             intermediate_size=4096, max_position_embeddings=512), add_pooling_layer=False)
os.makedirs(os.path.join(out, "weightless"), exist_ok=True)
path = os.path.join(out, "weightless", "bert_large_4layers.onnx")
torch.onnx.export(HF(large.eval().half(), "input_ids"), (torch.randint(0, 30522, (128, 384)),), path, dynamo=True)
os.remove(path + ".data")
# BART-large's encoder (Lewis et al., ACL 2020: d 1024, 16 heads, FFN 4096) alike, 4 of its 12 layers
bart_large = BartModel(BartConfig(vocab_size=50265, d_model=1024, encoder_layers=4, decoder_layers=1,
                                  encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
                                  decoder_ffn_dim=4096, max_position_embeddings=512)).get_encoder()
path = os.path.join(out, "weightless", "bart_large_4layers.onnx")
torch.onnx.export(HF(bart_large.eval().half(), "input_ids"), (torch.randint(0, 50265, (128, 384)),), path,
                  dynamo=True)
os.remove(path + ".data")

# one GPT-2 decode step (decode/): a new token per sequence against a KV cache of 15 positions per
# layer (inputs k0, v0, k1, v1 [B, heads, 15, head_dim]); it returns the hidden state and the grown cache
from transformers.cache_utils import DynamicCache  # noqa: E402


class DecodeStep(nn.Module):
    def __init__(s, m):
        super().__init__()
        s.m = m

    def forward(s, ids, k0, v0, k1, v1):
        cache = DynamicCache()
        cache.update(k0, v0, 0)
        cache.update(k1, v1, 1)
        o = s.m(input_ids=ids, past_key_values=cache, use_cache=True)
        c = o.past_key_values
        return o.last_hidden_state, c.layers[0].keys, c.layers[0].values, c.layers[1].keys, c.layers[1].values


gpt = GPT2Model(GPT2Config(vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=32)).eval()
step_args = (torch.randint(0, 256, (B, 1)), *[torch.randn(B, 4, S - 1, 8) for _ in range(4)])
counts["gpt2_decode"] = flops(DecodeStep(gpt), step_args)
os.makedirs(os.path.join(out, "decode"), exist_ok=True)
torch.onnx.export(DecodeStep(gpt), step_args, os.path.join(out, "decode", "gpt2_decode_step.onnx"), dynamo=True)
json.dump(counts, open(os.path.join(out, "flops.json"), "w"), indent=1, sort_keys=True)
