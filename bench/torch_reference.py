#!/usr/bin/env python3
"""Times the seeds' MultiHeadAttention (PyTorch, eval, causal) for the ratio
against `mha_bench`; with --bf16, PyTorch's own nn.MultiheadAttention in
bf16 (weights and activations bf16, causal mask), the peer of `simdattn bench
--op mha --shape BxTxDxH_bf16_bf16dot` (weights kept bf16, bf16 arithmetic).
Runs with Debian's python3-torch:

    /usr/bin/python3 bench/torch_reference.py --threads 2 [--bf16]
"""
import argparse
import os
import sys
import time

import torch

# The seeds' MultiHeadAttention as the golden data's generator holds it, so
# that the timed module is the one the golden tests check against.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "tests", "data"))
from make_golden import MultiHeadAttention  # noqa: E402


def module_and_call(b, t, d, h, bf16):
    """The module and a call of it on random input (eval, causal)."""
    d_out = 2 if d == 3 else d
    if not bf16:
        mha = MultiHeadAttention(d, d_out, t, 0.0, h).eval()
        x = torch.rand(b, t, d)
        return lambda: mha(x)
    mha = torch.nn.MultiheadAttention(d, h, batch_first=True)
    mha = mha.to(torch.bfloat16).eval()
    x = torch.rand(b, t, d).to(torch.bfloat16)
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    return lambda: mha(x, x, x, attn_mask=mask, need_weights=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bf16", action="store_true",
                        help="nn.MultiheadAttention in bf16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(123)
    kind = "nn.MultiheadAttention bf16" if args.bf16 else "MHA"
    print(f"torch {torch.__version__}, {args.threads} threads")
    shapes = [(1, 1024, 768, 12), (8, 256, 768, 12), (4, 1024, 1024, 16)]
    if not args.bf16:
        shapes.append((2, 6, 3, 2))
    for b, t, d, h in shapes:
        call = module_and_call(b, t, d, h, args.bf16)
        with torch.no_grad():
            call()  # Warm-up.
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                call()
                best = min(best, time.perf_counter() - start)
        print(f"{kind} {b}x{t}x{d}x{h}: {best * 1e3:.3f} ms "
              f"(best of {args.repeats})")


if __name__ == "__main__":
    main()
