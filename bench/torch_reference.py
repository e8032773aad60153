#!/usr/bin/env python3
"""Times the seeds' MultiHeadAttention (PyTorch, eval, causal) for the ratio
against `mha_bench`. Runs with Debian's python3-torch:

    /usr/bin/python3 bench/torch_reference.py --threads 2
"""
import argparse
import time

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    """The seeds' efficient multi-head attention (chapter 3)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length),
                               diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)
        keys = keys.transpose(1, 2)
        queries = queries.transpose(1, 2)
        values = values.transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


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
