#!/usr/bin/python3
"""Writes tests/data/rope/: PyTorch golden cases for rotary position
embedding (RoPE), as the models define it, in float64:

  half split   GPT-NeoX and Llama (HF's rotate_half): inv_freq = 1 /
               theta^(arange(0, rot, 2) / rot), emb = cat(freqs, freqs),
               x * cos + rotate_half(x) * sin over the first rot dims.
  interleaved  GPT-J (HF's rotate_every_two): sin and cos repeated per pair,
               x * cos + rotate_every_two(x) * sin.

Dims past rot pass through (partial rotary). Token t of batch item b sits at
positions[b] + t. For each case: <name>.x.npy (float32 input, (b, h, T, D)),
<name>.out.npy (float32 of the float64 result) and cases.json.

    /usr/bin/python3 tests/data/make_rope_golden.py
"""

import os
import sys
import zlib

sys.dont_write_bytecode = True

import torch  # noqa: E402

from make_golden import save_npy, write_index  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rope")


def rope(x, positions, theta, rot, interleaved):
    b, h, T, D = x.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64)
                                / rot))
    pos = torch.tensor(positions, dtype=torch.float64)[:, None] + \
        torch.arange(T, dtype=torch.float64)[None, :]          # (b, T)
    freqs = pos[..., None] * inv_freq                          # (b, T, rot/2)
    xr, rest = x[..., :rot], x[..., rot:]
    if interleaved:
        cos = freqs.cos().repeat_interleave(2, dim=-1)[:, None]
        sin = freqs.sin().repeat_interleave(2, dim=-1)[:, None]
        x1, x2 = xr[..., ::2], xr[..., 1::2]
        turned = torch.stack((-x2, x1), dim=-1).flatten(-2)
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
        turned = torch.cat((-x2, x1), dim=-1)
    return torch.cat((xr * cos + turned * sin, rest), dim=-1)


CASES = [
    # name, (b, h, T, D), rot, theta, interleaved, positions
    ("neox_full", (2, 3, 5, 64), 64, 10000.0, False, [0, 7]),
    ("neox_partial", (1, 4, 9, 80), 32, 10000.0, False, [3]),
    ("neox_odd_tail", (3, 2, 4, 38), 38, 500000.0, False, [0, 100, 4093]),
    ("gptj_full", (2, 2, 6, 64), 64, 10000.0, True, [0, 2048]),
    ("gptj_partial", (1, 3, 7, 256), 64, 10000.0, True, [11]),
    ("gptj_short", (2, 1, 3, 10), 6, 1000.0, True, [5, 0]),
    ("decode_long_positions", (4, 2, 1, 128), 128, 10000.0, False,
     [0, 1, 4095, 131071]),
]


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    doc = {"cases": []}
    written = []
    for name, shape, rot, theta, interleaved, positions in CASES:
        gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
        out = rope(x.double(), positions, theta, rot, interleaved)
        for suffix, t in ((".x.npy", x), (".out.npy", out.float())):
            save_npy(os.path.join(OUT_DIR, name + suffix), t)
            written.append(name + suffix)
        doc["cases"].append({"name": name, "shape": list(shape),
                             "rotary_dim": rot, "theta": theta,
                             "interleaved": interleaved,
                             "positions": positions})
    write_index(OUT_DIR, doc, written, 200000, "make_rope_golden.py")


if __name__ == "__main__":
    main()
