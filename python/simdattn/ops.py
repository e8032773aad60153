"""simdattn's functions as torch ops, torch.ops.simdattn.* (importing
simdattn.torch or simdattn.ops registers them), with schemas, so that they
show in traces and profiles under their names:

    torch.ops.simdattn.sdpa(q, k, v, *, scale=None, causal=False,
                            causal_offset=0, window=0, softcap=0.0,
                            sinks=None, alibi_slopes=None, key_lengths=None)
        -> out
    torch.ops.simdattn.sdpa.out(..., out=out) -> out        (writes out)
    torch.ops.simdattn.sdpa_lse(...) -> (out, lse)
    torch.ops.simdattn.sdpa_lse.out(..., out=out, lse=lse) -> (out, lse)

Arguments as simdattn.scaled_dot_product_attention's; key_lengths an int64
tensor, sinks and alibi_slopes float tensors (one per query head). CPU
float32 tensors; errors are those of scaled_dot_product_attention
(ValueError, TypeError naming the argument). No autograd kernel: a tensor
that requires grad under grad mode is refused.

Registered with torch 1.13's torch.library.Library("simdattn", "DEF").
"""
import torch

import simdattn as _simdattn

_ARGS = ("Tensor q, Tensor k, Tensor v, *, float? scale=None, "
         "bool causal=False, int causal_offset=0, int window=0, "
         "float softcap=0.0, Tensor? sinks=None, Tensor? alibi_slopes=None, "
         "Tensor? key_lengths=None")


def _kwargs(scale, causal, causal_offset, window, softcap, sinks,
            alibi_slopes, key_lengths):
    return dict(scale=scale, causal=causal, causal_offset=causal_offset,
                window=window, softcap=softcap, sinks=sinks,
                alibi=alibi_slopes, key_lengths=key_lengths)


def _sdpa(q, k, v, *, scale=None, causal=False, causal_offset=0, window=0,
          softcap=0.0, sinks=None, alibi_slopes=None, key_lengths=None):
    return _simdattn.scaled_dot_product_attention(
        q, k, v, **_kwargs(scale, causal, causal_offset, window, softcap,
                           sinks, alibi_slopes, key_lengths))


def _sdpa_out(q, k, v, *, scale=None, causal=False, causal_offset=0,
              window=0, softcap=0.0, sinks=None, alibi_slopes=None,
              key_lengths=None, out):
    _simdattn.scaled_dot_product_attention(
        q, k, v, out=out, **_kwargs(scale, causal, causal_offset, window,
                                    softcap, sinks, alibi_slopes,
                                    key_lengths))
    return out


def _sdpa_lse(q, k, v, *, scale=None, causal=False, causal_offset=0,
              window=0, softcap=0.0, sinks=None, alibi_slopes=None,
              key_lengths=None):
    return _simdattn.scaled_dot_product_attention(
        q, k, v, return_lse=True,
        **_kwargs(scale, causal, causal_offset, window, softcap, sinks,
                  alibi_slopes, key_lengths))


def _sdpa_lse_out(q, k, v, *, scale=None, causal=False, causal_offset=0,
                  window=0, softcap=0.0, sinks=None, alibi_slopes=None,
                  key_lengths=None, out, lse):
    _simdattn._C.sdpa(
        q, k, v, out, lse,
        None if scale is None else float(scale), bool(causal),
        int(causal_offset), None, int(window), float(softcap),
        _simdattn._floats(sinks, "sinks"), _simdattn._alibi(alibi_slopes),
        _simdattn._ints(key_lengths, "key_lengths"), 0.0, 0, 0)
    return out, lse


_lib = torch.library.Library("simdattn", "DEF")
_lib.define(f"sdpa({_ARGS}) -> Tensor")
_lib.define(f"sdpa.out({_ARGS}, Tensor(a!) out) -> Tensor(a!)")
_lib.define(f"sdpa_lse({_ARGS}) -> (Tensor, Tensor)")
_lib.define(f"sdpa_lse.out({_ARGS}, Tensor(a!) out, Tensor(b!) lse) -> "
            "(Tensor(a!), Tensor(b!))")
_lib.impl("sdpa", _sdpa, "CPU")
_lib.impl("sdpa.out", _sdpa_out, "CPU")
_lib.impl("sdpa_lse", _sdpa_lse, "CPU")
_lib.impl("sdpa_lse.out", _sdpa_lse_out, "CPU")
