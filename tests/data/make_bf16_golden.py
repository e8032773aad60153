#!/usr/bin/python3
"""Writes tests/data/bf16/: the seeds' MultiHeadAttention in bf16 arithmetic.

Run with Debian's interpreter, which has python3-torch and numpy:

    /usr/bin/python3 tests/data/make_bf16_golden.py

simdattn's bf16 arithmetic (ForwardOptions::compute = kBFloat16) rounds each
product's operands to bf16 (nearest even) and sums in float32. PyTorch's CPU
autocast does the same for nn.Linear but also rounds every result to bf16, so
this script runs the seed module (make_golden.py's copy of seed 003) with
its products' operands rounded the same way instead, in float64 so that only
the roundings differ from exact arithmetic:
  x and the four weight matrices rounded; Q, K and V rounded; the weights P
  rounded as flash kernels round them, unnormalised: bf16(exp(s - max)),
  divided by the float64 sum of exp(s - max) (T <= 256: one tile of keys,
  whose max is the row's); the context rounded before out_proj.
The script checks that the emulation with no rounding gives the module's own
output, so that the two cannot drift apart.

Files, each case <name>: <name>.safetensors (the F32 state_dict, bf16-exact
values), <name>.input.npy, <name>.output.npy (float32), and cases.json.
Running it again rewrites identical bytes.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden  # noqa: E402  (the seed classes and the writers)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bf16")
MAX_TOTAL_BYTES = 1000 * 1000


def bf16(t, on=True):
    """t rounded to bf16 (nearest even) and back, in t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype) if on else t


def forward(m, x, rounded):
    """The seed's forward in float64 with simdattn's bf16 roundings."""
    w = {name: bf16(p.detach().double(), rounded)
         for name, p in m.named_parameters() if name.endswith("weight")}
    b, t, _ = x.shape
    h, hd = m.num_heads, m.head_dim
    xr = bf16(x.double(), rounded)

    def heads(name):
        y = bf16(xr @ w[name].T, rounded)
        return y.view(b, t, h, hd).transpose(1, 2)

    q, k, v = heads("W_query.weight"), heads("W_key.weight"), \
        heads("W_value.weight")
    s = (q @ k.transpose(2, 3)) / hd ** 0.5
    s.masked_fill_(m.mask.bool()[:t, :t], -torch.inf)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    p = bf16(e.float(), rounded).double() / e.sum(dim=-1, keepdim=True)
    context = (p @ v).transpose(1, 2).reshape(b, t, h * hd)
    return (bf16(context, rounded) @ w["out_proj.weight"].T +
            m.out_proj.bias.detach().double())


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    cases, written = [], []
    for name, batch, t, d_in, d_out, heads, seed in [
            ("mha_bf16_small", 2, 9, 24, 32, 4, 11),
            ("mha_bf16_heads_of_64", 1, 200, 96, 128, 2, 12)]:
        torch.manual_seed(seed)
        m = make_golden.MultiHeadAttention(d_in, d_out, t, 0.0, heads).eval()
        with torch.no_grad():  # bf16-exact weights: the file holds them.
            for p in m.parameters():
                p.copy_(bf16(p))
        x = torch.randn(batch, t, d_in)
        with torch.no_grad():
            plain = forward(m, x, rounded=False)
            assert torch.allclose(plain.float(), m(x), atol=1e-5), name
            y = forward(m, x, rounded=True).float()
        state = {k: v for k, v in m.state_dict().items()}
        make_golden.write_safetensors(os.path.join(OUT_DIR, name +
                                                   ".safetensors"),
                                      state, {"module": "MultiHeadAttention"})
        make_golden.save_npy(os.path.join(OUT_DIR, name + ".input.npy"), x)
        make_golden.save_npy(os.path.join(OUT_DIR, name + ".output.npy"), y)
        written += [name + ext for ext in
                    (".safetensors", ".input.npy", ".output.npy")]
        cases.append({"name": name, "num_heads": heads,
                      "max_abs_output": float(y.abs().max())})
    make_golden.write_index(OUT_DIR, {"cases": cases}, written,
                            MAX_TOTAL_BYTES, "make_bf16_golden.py")


if __name__ == "__main__":
    main()
