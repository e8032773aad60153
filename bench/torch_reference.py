#!/usr/bin/env python3
"""Times the seeds' MultiHeadAttention (PyTorch, eval, causal) for the ratio
against `mha_bench`. Runs with Debian's python3-torch:

    /usr/bin/python3 bench/torch_reference.py --threads 2
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


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(123)
    print(f"torch {torch.__version__}, {args.threads} threads")
    for b, t, d, h in [(1, 1024, 768, 12), (8, 256, 768, 12),
                       (4, 1024, 1024, 16), (2, 6, 3, 2)]:
        d_out = 2 if d == 3 else d
        mha = MultiHeadAttention(d, d_out, t, 0.0, h).eval()
        x = torch.rand(b, t, d)
        with torch.no_grad():
            mha(x)  # Warm-up.
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                mha(x)
                best = min(best, time.perf_counter() - start)
        print(f"MHA {b}x{t}x{d}x{h}: {best * 1e3:.3f} ms (best of {args.repeats})")


if __name__ == "__main__":
    main()
