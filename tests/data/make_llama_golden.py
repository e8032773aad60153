#!/usr/bin/python3
"""Writes tests/data/llama/: PyTorch golden cases for a Hugging Face
llama-style attention layer driven by a continuous-batching server.

    /usr/bin/python3 tests/data/make_llama_golden.py

The layer is written plainly in float64 from HF's LlamaAttention /
Qwen2Attention / MistralAttention (eager): q_proj, k_proj, v_proj (biases in
Qwen2), o_proj back to hidden_size (a bias only with attention_bias), the
grouped key/value heads repeated (repeat_kv), rotate_half RoPE at each token's
position (inv_freq = 1 / theta^(arange(0, D, 2) / D)), scores scaled by
1 / sqrt(head_dim), the causal mask and Mistral's sliding window (key j
visible at position p iff p - W < j <= p), softmax, o_proj.

A schedule of serving steps runs over sequences that join, decode, verify
draft tokens (some rejected afterwards: the sequence rolls back and the next
step writes other tokens at those positions) and leave. At every step each
listed sequence's new tokens are attended over its kept tokens plus
themselves, as the layer over the whole sequence would: the expected output of
a step is the last rows of the full causal forward over the sequence so far.

Per case, into tests/data/llama/:
  <name>.safetensors  the layer's state_dict under HF's names (float32)
  <name>.x.npy        every step's packed hidden states, steps concatenated
                      (tokens, hidden_size), float32
  <name>.y.npy        the outputs, likewise, float32 of the float64 result
and cases.json: the config and the schedule (per step, per sequence: id,
new tokens, tokens rejected after the step). Running it again rewrites
identical bytes.
"""

import math
import os
import sys

sys.dont_write_bytecode = True

import torch  # noqa: E402

from make_golden import save_npy, write_index, write_safetensors  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama")
MAX_TOTAL_BYTES = 300 * 1000

# Steps: (sequence id, new tokens, rejected afterwards). A sequence absent
# from a step is idle; one that never appears again has left (its blocks go
# back to the pool, and a later joiner reuses them).
SCHEDULE = [
    [(0, 7, 0), (1, 3, 0)],                # two prefills
    [(0, 1, 0), (1, 1, 0), (2, 5, 0)],     # decodes; sequence 2 joins
    [(0, 4, 2), (2, 1, 0), (3, 9, 0)],     # 0 verifies 4 drafts, rejects 2;
                                           # 1 leaves; 3 joins
    [(0, 1, 0), (2, 3, 1), (3, 1, 0)],     # 2 verifies 3, rejects 1
    [(0, 2, 0), (3, 1, 0), (4, 6, 0)],     # 2 leaves; 4 joins
    [(0, 1, 0), (3, 1, 0), (4, 1, 0)],     # decodes past the window
]

CASES = [
    # Qwen2-style: q/k/v biases, no o_proj bias, 4 query heads over 2 K/V
    # heads of 24 (num_heads * head_dim = 96 != hidden_size 64), a window.
    dict(name="qwen2_gqa_window", hidden=64, num_heads=4, num_kv_heads=2,
         head_dim=24, qkv_bias=True, out_bias=False, window=6,
         theta=10000.0, seed=11),
    # Llama with attention_bias = True: every projection biased; MQA; no
    # window; a large theta (Llama 3).
    dict(name="llama_mqa_bias", hidden=48, num_heads=3, num_kv_heads=1,
         head_dim=16, qkv_bias=True, out_bias=True, window=0,
         theta=500000.0, seed=12),
]


def rope(x, positions, theta):
    """HF's apply_rotary_pos_emb with rotate_half: x (heads, T, D)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64)
                                / d))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def layer(c, w, x):
    """The layer over one whole sequence x (T, hidden), float64: (T, hidden)."""
    t = x.shape[0]
    h, kvh, d = c["num_heads"], c["num_kv_heads"], c["head_dim"]

    def linear(name, x):
        y = x @ w[name + ".weight"].T
        bias = w.get(name + ".bias")
        return y if bias is None else y + bias

    q = linear("q_proj", x).view(t, h, d).transpose(0, 1)
    k = linear("k_proj", x).view(t, kvh, d).transpose(0, 1)
    v = linear("v_proj", x).view(t, kvh, d).transpose(0, 1)
    positions = torch.arange(t)
    q, k = rope(q, positions, c["theta"]), rope(k, positions, c["theta"])
    k = k.repeat_interleave(h // kvh, dim=0)   # repeat_kv
    v = v.repeat_interleave(h // kvh, dim=0)
    scores = (q @ k.transpose(1, 2)) / math.sqrt(d)
    pos, key = positions[:, None], positions[None, :]
    masked = key > pos
    if c["window"]:
        masked |= key <= pos - c["window"]
    scores = scores.masked_fill(masked, -math.inf)
    context = torch.softmax(scores, dim=-1) @ v          # (h, T, d)
    return linear("o_proj", context.transpose(0, 1).reshape(t, h * d))


def build(c):
    g = torch.Generator().manual_seed(c["seed"])
    hidden, q_dim = c["hidden"], c["num_heads"] * c["head_dim"]
    kv_dim = c["num_kv_heads"] * c["head_dim"]

    def uniform(*shape, fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return ((torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1)
                * bound).to(torch.float32)

    w = {"q_proj.weight": uniform(q_dim, hidden, fan_in=hidden),
         "k_proj.weight": uniform(kv_dim, hidden, fan_in=hidden),
         "v_proj.weight": uniform(kv_dim, hidden, fan_in=hidden),
         "o_proj.weight": uniform(hidden, q_dim, fan_in=q_dim)}
    if c["qkv_bias"]:
        w["q_proj.bias"] = uniform(q_dim, fan_in=hidden)
        w["k_proj.bias"] = uniform(kv_dim, fan_in=hidden)
        w["v_proj.bias"] = uniform(kv_dim, fan_in=hidden)
    if c["out_bias"]:
        w["o_proj.bias"] = uniform(hidden, fan_in=q_dim)
    w64 = {k: v.to(torch.float64) for k, v in w.items()}

    kept = {}  # sequence id -> its kept hidden states (float32), (T, hidden)
    xs, ys = [], []
    for step in SCHEDULE:
        for seq, new, rejected in step:
            x_new = torch.randn(new, hidden, generator=g, dtype=torch.float64)
            x_new = x_new.to(torch.float32)
            seq_x = torch.cat([kept.get(seq, torch.zeros(0, hidden)), x_new])
            y = layer(c, w64, seq_x.to(torch.float64))[-new:]
            xs.append(x_new)
            ys.append(y)
            kept[seq] = seq_x[:seq_x.shape[0] - rejected]
    return w, torch.cat(xs), torch.cat(ys)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    written, index = [], []
    for c in CASES:
        w, x, y = build(c)
        name = c["name"]
        write_safetensors(os.path.join(OUT_DIR, name + ".safetensors"), w,
                          {"source": "tests/data/make_llama_golden.py"})
        save_npy(os.path.join(OUT_DIR, name + ".x.npy"), x)
        save_npy(os.path.join(OUT_DIR, name + ".y.npy"), y)
        written += [name + ".safetensors", name + ".x.npy", name + ".y.npy"]
        index.append(dict(c, schedule=SCHEDULE,
                          max_abs_output=float(y.abs().max())))
    write_index(OUT_DIR, {"cases": index}, written, MAX_TOTAL_BYTES,
                "make_llama_golden.py")


if __name__ == "__main__":
    main()
