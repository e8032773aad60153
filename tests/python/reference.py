"""A float64 torch reference for attention with every mask variant, as
kernels.h's AttentionMask defines them."""
import math

import numpy as np
import torch


def as64(x):
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    return x.detach().to(torch.float64)


def attention(q, k, v, scale=None, causal=False, causal_offset=0,
              causal_offsets=None, window=0, softcap=0.0, sinks=None,
              alibi=None, key_lengths=None):
    """Returns (out, lse), float64 torch tensors."""
    q, k, v = as64(q), as64(k), as64(v)
    b, h, tq, d = q.shape
    tk = k.shape[2]
    group = h // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (1.0 / math.sqrt(d)) if scale is None else scale
    x = (q @ k.transpose(-1, -2)) * s
    if softcap > 0:
        x = softcap * torch.tanh(x / softcap)
    offsets = (torch.tensor(causal_offsets, dtype=torch.float64)
               if causal_offsets is not None
               else torch.full((b,), float(causal_offset), dtype=torch.float64))
    pos = torch.arange(tq, dtype=torch.float64)[None, :] + offsets[:, None]
    pos = pos[:, None, :, None]  # (b, 1, tq, 1)
    j = torch.arange(tk, dtype=torch.float64)[None, None, None, :]
    if alibi is not None:
        slopes = torch.tensor(alibi, dtype=torch.float64)[None, :, None, None]
        x = x - slopes * (pos - j).abs()
    mask = torch.zeros(b, 1, tq, tk, dtype=torch.bool)
    if causal or window > 0:
        mask |= j > pos
    if window > 0:
        mask |= j <= pos - window
    if key_lengths is not None:
        kl = torch.tensor(key_lengths, dtype=torch.float64)[:, None, None, None]
        mask |= j >= kl
    x = x.masked_fill(mask, -math.inf)
    m = x.amax(dim=-1, keepdim=True)
    if sinks is not None:
        sk = torch.tensor(sinks, dtype=torch.float64)[None, :, None, None]
        m = torch.maximum(m, sk.expand_as(m))
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    denom = e.sum(dim=-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sk - m)
    w = torch.where(denom > 0, e / denom, torch.zeros_like(e))
    out = w @ v
    lse = (m + torch.log(denom)).squeeze(-1)
    return out, lse
