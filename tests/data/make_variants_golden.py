#!/usr/bin/python3
"""Writes tests/data/variants/: PyTorch golden cases for attention variants.

Run with Debian's interpreter, which has python3-torch and numpy:

    /usr/bin/python3 tests/data/make_variants_golden.py

Each variant is written plainly in torch, in float64, from its published
definition (not from simdattn's documentation), and they compose the way the
models that introduced them compose them:

  sliding window  Mistral (HF MistralModel's sliding-window causal mask): key j
                  is visible to the query at position p iff p - W < j <= p.
  softcapping     Gemma 2 (HF Gemma2 eager attention): the scaled scores s
                  become c * tanh(s / c), before the masks and biases are
                  added.
  ALiBi           Press et al. (ofirpress/attention_with_linear_biases, as
                  BLOOM uses them): bias -m_h * |p - j| with the paper's
                  geometric slopes m_h for the head count. BLOOM adds m_h * j
                  instead, which gives the same softmax but another
                  log-sum-exp; the distance form is the paper's.
  sinks           gpt-oss (HF GptOss eager attention): each query head's sink
                  logit is concatenated to the row as an extra column, the
                  row is softmaxed, and the column is dropped (no value).
  ragged batches  per batch item, its own key length (keys j >= length are
                  masked) and its own causal offset (query i sits at
                  p = i + offset_b).
  log-sum-exp     torch.logsumexp over the row's visible scores plus the sink:
                  -inf for a row that sees nothing and has no sink.
  grouped heads   HF's repeat_kv: query head h reads key/value head
                  h // (q_heads // kv_heads).

A row that sees no key and has no sink is NaN in torch's softmax; simdattn
defines it as zeros, and so does this script (it checks that only such rows
are NaN before zeroing them).

For every case the script writes, into tests/data/variants/,
  <name>.q.npy, .k.npy, .v.npy   float32 inputs, (b, h, T, D)
  <name>.out.npy                 float32 output (b, q_heads, Tq, Dv)
  <name>.lse.npy                 float32 log-sum-exp (b, q_heads, Tq)
  <name>.weights.npy             float32 attention weights (b, q_heads, Tq,
                                 Tk), only for small cases
and the index cases.json with each case's shape and mask parameters (sinks
and ALiBi slopes as the float32 values the kernels get). Running it again
rewrites identical bytes; files it no longer produces are removed.
"""

import math
import os
import sys
import zlib

sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
import torch  # noqa: E402

from make_golden import save_npy, write_index  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "variants")
MAX_TOTAL_BYTES = 2 * 1000 * 1000
# Attention weights are written for cases with at most this many of them.
MAX_WEIGHTS = 20000


def alibi_slopes(n):
    """The ALiBi paper's slopes for n heads (its reference code, verbatim in
    substance): a geometric sequence starting at 2^(-8/n) for powers of two;
    otherwise the closest power of two's slopes, then every other slope of
    twice that many heads."""

    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][:n - closest]


def repeat_kv(x, n_rep):
    """HF's repeat_kv: (b, kv_heads, T, D) -> (b, kv_heads * n_rep, T, D)."""
    b, kv_heads, t, d = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(b, kv_heads, n_rep, t, d)
    return x.reshape(b, kv_heads * n_rep, t, d)


def attention(q, k, v, c):
    """Returns (out, lse, weights) in float64 for one case's parameters."""
    b, hq, tq, d = q.shape
    tk = k.shape[2]
    k = repeat_kv(k, hq // k.shape[1])
    v = repeat_kv(v, hq // v.shape[1])
    scale = c["scale"] if c["scale"] is not None else 1.0 / math.sqrt(d)

    scores = (q @ k.transpose(2, 3)) * scale
    if c["softcap"]:
        cap = c["softcap"]
        scores = scores / cap
        scores = torch.tanh(scores)
        scores = scores * cap

    offsets = c["causal_offsets"] or [c["causal_offset"]] * b
    # Position of query i of item b among the keys: (b, 1, Tq, 1).
    pos = (torch.arange(tq, dtype=torch.int64)[None, :] +
           torch.tensor(offsets, dtype=torch.int64)[:, None])[:, None, :, None]
    key = torch.arange(tk, dtype=torch.int64)[None, None, None, :]

    if c["alibi_slopes"] is not None:
        slopes = torch.tensor(c["alibi_slopes"], dtype=torch.float64)
        distance = (pos - key).abs().to(torch.float64)
        scores = scores - slopes[None, :, None, None] * distance

    masked = torch.zeros(b, 1, tq, tk, dtype=torch.bool)
    if c["causal"] or c["window"]:
        masked |= key > pos
    if c["window"]:
        # Mistral: sliding_attend_mask = arange(T) <= position - window.
        masked |= key <= pos - c["window"]
    if c["key_lengths"] is not None:
        lengths = torch.tensor(c["key_lengths"], dtype=torch.int64)
        masked |= key >= lengths[:, None, None, None]
    scores = scores.masked_fill(masked, -math.inf)

    if c["sinks"] is not None:
        # gpt-oss: the sink is one more logit in the row, with no value.
        sinks = torch.tensor(c["sinks"], dtype=torch.float64)
        sinks = sinks.reshape(1, -1, 1, 1).expand(b, -1, tq, -1)
        combined = torch.cat([scores, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = torch.softmax(combined, dim=-1)
        weights = probs[..., :-1]
        lse = torch.logsumexp(torch.cat([scores, sinks], dim=-1), dim=-1)
    else:
        weights = torch.softmax(scores, dim=-1)
        lse = torch.logsumexp(scores, dim=-1)
        empty = masked.expand(b, hq, tq, tk).all(dim=-1)
        nan_rows = weights.isnan().any(dim=-1)
        assert torch.equal(nan_rows, empty), c["name"]
        weights = weights.masked_fill(empty[..., None], 0.0)
    return weights @ v, lse, weights


def case(name, what, *, batch=1, q_heads=2, kv_heads=None, q_tokens,
         k_tokens=None, head_dim, value_dim=None, scale=None, causal=False,
         causal_offset=0, causal_offsets=None, window=0, key_lengths=None,
         softcap=0.0, alibi=False, sinks=False, q_gain=1.0):
    """One case. q ~ q_gain * N(0, 1) (a gain makes the softcap bite), k and
    v ~ N(0, 1); sinks ~ 2 N(0, 1); float32."""
    return dict(name=name, what=what, batch=batch, q_heads=q_heads,
                kv_heads=kv_heads or q_heads, q_tokens=q_tokens,
                k_tokens=k_tokens or q_tokens, head_dim=head_dim,
                value_dim=value_dim or head_dim, scale=scale, causal=causal,
                causal_offset=causal_offset, causal_offsets=causal_offsets,
                window=window, key_lengths=key_lengths, softcap=softcap,
                alibi=alibi, sinks=sinks, q_gain=q_gain)


def cases():
    return [
        case("t1_d5_window1", "T = 1, W = 1: the row sees its own key only",
             q_tokens=1, head_dim=5, window=1),
        case("t1_decode_alibi_gqa",
             "one query against a cache of 37, ALiBi, grouped-query heads",
             batch=2, q_heads=4, kv_heads=2, q_tokens=1, k_tokens=37,
             head_dim=5, value_dim=3, causal=True, causal_offset=36,
             alibi=True),
        case("w1_t9_d67_mqa", "W = 1 over a causal square: out = own value",
             q_heads=3, kv_heads=1, q_tokens=9, head_dim=67, causal=True,
             window=1),
        case("window_gt_t_d67_gqa", "W = 100 > T = 23: plain causal",
             q_heads=4, kv_heads=2, q_tokens=23, head_dim=67, window=100),
        case("window_decode_offset",
             "4 queries at the end of a cache of 300, W = 64",
             batch=2, q_heads=4, kv_heads=2, q_tokens=4, k_tokens=300,
             head_dim=17, value_dim=8, causal=True, causal_offset=296,
             window=64),
        case("window_ragged_decode",
             "3 sequences at positions 197, 50, 120 of a cache of 200, "
             "W = 32",
             batch=3, q_heads=2, kv_heads=1, q_tokens=3, k_tokens=200,
             head_dim=16, causal=True, causal_offsets=[197, 50, 120],
             key_lengths=[200, 53, 123], window=32),
        case("softcap_only", "softcap 2 on large scores, no mask",
             q_tokens=17, k_tokens=29, head_dim=5, value_dim=7, softcap=2.0,
             q_gain=4.0),
        case("softcap_window", "softcap 5 with a causal window of 7",
             q_heads=3, q_tokens=40, head_dim=67, value_dim=4, causal=True,
             window=7, softcap=5.0, q_gain=3.0),
        case("sinks_masked_row",
             "sinks; item 0 has no keys: zeros, its LSE the sink",
             batch=2, q_heads=4, kv_heads=1, q_tokens=5, k_tokens=13,
             head_dim=5, key_lengths=[0, 13], sinks=True),
        case("sinks_causal_offset", "sinks with a causal offset",
             q_heads=3, q_tokens=33, k_tokens=40, head_dim=67, value_dim=5,
             causal=True, causal_offset=7, sinks=True),
        case("alibi_noncausal", "ALiBi alone, both sides of the diagonal",
             q_heads=8, kv_heads=2, q_tokens=31, head_dim=5, alibi=True),
        case("alibi_noncausal_offset",
             "ALiBi, not causal, queries at positions 6..17 of 18 keys",
             q_heads=4, q_tokens=12, k_tokens=18, head_dim=8,
             causal_offset=6, alibi=True),
        case("alibi_h12_causal",
             "ALiBi for 12 heads (non-power-of-two slopes), causal",
             q_heads=12, kv_heads=4, q_tokens=20, k_tokens=30, head_dim=67,
             value_dim=3, causal=True, causal_offset=10, alibi=True),
        case("alibi_softcap", "ALiBi after the softcap",
             q_heads=2, q_tokens=24, head_dim=16, causal=True, softcap=3.0,
             alibi=True, q_gain=3.0),
        case("all_window_gqa",
             "window 16 + softcap + ALiBi + sinks, 8 query heads on 2",
             q_heads=8, kv_heads=2, q_tokens=70, head_dim=67, value_dim=9,
             causal=True, window=16, softcap=4.0, alibi=True, sinks=True,
             q_gain=2.0),
        case("ragged_prefill",
             "chunked prefill: offsets 40, 0, 20; lengths 64, 24, 30",
             batch=3, q_heads=2, kv_heads=1, q_tokens=24, k_tokens=64,
             head_dim=5, causal=True, causal_offsets=[40, 0, 20],
             key_lengths=[64, 24, 30], alibi=True),
        case("split_decode_window_sinks",
             "decode over 600 keys in two 512-key splits; the window and "
             "the last split hold every visible key, the first the sink",
             kv_heads=1, q_tokens=1, k_tokens=600, head_dim=8, causal=True,
             causal_offset=599, window=64, sinks=True),
        case("split_decode_ragged_all",
             "decode, 2 splits: item 0 sees keys of the second split only, "
             "item 1 of the first only; window, softcap, ALiBi, sinks",
             batch=2, kv_heads=1, q_tokens=2, k_tokens=700, head_dim=8,
             causal=True,
             causal_offsets=[698, 100], key_lengths=[700, 102], window=64,
             softcap=5.0, alibi=True, sinks=True, q_gain=2.0),
        case("window_past_length",
             "item 0's window lies past its key length: zeros, LSE -inf",
             batch=2, kv_heads=1, q_tokens=3, k_tokens=80, head_dim=4,
             causal=True, causal_offsets=[70, 20], key_lengths=[40, 80],
             window=8),
        case("split_decode_nothing_visible",
             "decode, 2 splits: item 0 sees no key in either, no sink",
             batch=2, kv_heads=1, q_tokens=1, k_tokens=600, head_dim=4,
             causal=True, causal_offsets=[599, 30], key_lengths=[10, 600],
             window=8, alibi=True),
        # Key tiles are 256 keys and row tasks 192 rows (128 on SCALAR):
        # these cross both; those of 520 and 600 keys also split the keys
        # (fewer than 16 tasks) in chunks of 512.
        case("tiles_window_offset",
             "200 queries at 320.. of 520 keys, W = 300",
             q_heads=2, kv_heads=1, q_tokens=200, k_tokens=520, head_dim=32,
             value_dim=16, causal=True, causal_offset=320, window=300),
        case("tiles_causal_window",
             "300 x 300 causal, W = 280: long windows across tiles",
             q_tokens=300, head_dim=16, value_dim=8, causal=True,
             window=280),
        case("tiles_all_ragged",
             "window 257 + softcap + ALiBi + sinks, ragged, 200 x 600",
             batch=2, q_heads=2, kv_heads=1, q_tokens=200, k_tokens=600,
             head_dim=23, value_dim=24, scale=0.125,
             causal_offsets=[400, 250], key_lengths=[600, 450], window=257,
             softcap=8.0, alibi=True, sinks=True, q_gain=2.0),
    ]


def f32(values):
    """Python floats holding exactly the float32 values the kernels get."""
    return [float(x) for x in np.asarray(values, dtype=np.float32)]


def main():
    # The same bits on any machine: one thread, deterministic kernels.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    index, written = [], set()
    for c in cases():
        # Each case's own seed: adding a case leaves the others' bytes.
        seed = zlib.crc32(c["name"].encode())
        gen = torch.Generator().manual_seed(seed)
        name = c["name"]
        b, hq, hkv = c["batch"], c["q_heads"], c["kv_heads"]
        tq, tk = c["q_tokens"], c["k_tokens"]
        q = (torch.randn(b, hq, tq, c["head_dim"], generator=gen) *
             c["q_gain"])
        k = torch.randn(b, hkv, tk, c["head_dim"], generator=gen)
        v = torch.randn(b, hkv, tk, c["value_dim"], generator=gen)
        c["sinks"] = (f32(2.0 * torch.randn(hq, generator=gen))
                      if c["sinks"] else None)
        c["alibi_slopes"] = f32(alibi_slopes(hq)) if c.pop("alibi") else None
        c["seed"] = seed
        c.pop("q_gain")

        out, lse, weights = attention(q.double(), k.double(), v.double(), c)
        arrays = {"q": q, "k": k, "v": v, "out": out, "lse": lse}
        if weights.numel() <= MAX_WEIGHTS:
            arrays["weights"] = weights
        c["files"] = {}
        for key, t in arrays.items():
            file = f"{name}.{key}.npy"
            save_npy(os.path.join(OUT_DIR, file), t)
            c["files"][key] = file
            written.add(file)
        index.append(c)

    doc = {
        "about": "Golden cases for simdattn's attention variants, written by "
                 "make_variants_golden.py (float64 torch from the published "
                 "definitions; inputs torch.randn float32 from "
                 "torch.Generator().manual_seed(seed)). Shapes: q (batch, "
                 "q_heads, q_tokens, head_dim), k (batch, kv_heads, "
                 "k_tokens, head_dim), v (batch, kv_heads, k_tokens, "
                 "value_dim), out (batch, q_heads, q_tokens, value_dim), lse "
                 "(batch, q_heads, q_tokens), weights (batch, q_heads, "
                 "q_tokens, k_tokens). scale null: 1 / sqrt(head_dim); "
                 "0 or null: off. All arrays are little-endian float32.",
        "torch_version": torch.__version__.split("+")[0],
        "cases": index,
    }
    write_index(OUT_DIR, doc, written, MAX_TOTAL_BYTES,
                "make_variants_golden.py")


if __name__ == "__main__":
    main()
