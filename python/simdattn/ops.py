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

The serving step over an engine's pools (vLLM's conventions: its
reshape_and_cache and its varlen attention over block_table), pools as
simdattn.KVPages takes them (key_cache, value_cache (None: latent),
kv_cache_dtype one of simdattn.info()["cache_types"]):

    torch.ops.simdattn.write_kv_slots(key, value, key_cache, value_cache,
                                      slot_mapping, kv_cache_dtype, *,
                                      key_scales=None, value_scales=None,
                                      k_scale=1.0, v_scale=1.0, value_dim=0)
    torch.ops.simdattn.varlen_attention(query, key_cache, value_cache,
                                        query_start_loc, seq_lens,
                                        block_table, kv_cache_dtype, *,
                                        scale=None, causal=True, window=0,
                                        softcap=0.0, key_scales=None,
                                        value_scales=None, k_scale=1.0,
                                        v_scale=1.0, value_dim=0) -> out
    torch.ops.simdattn.varlen_attention.out(..., out=out) -> out

Each call checks the step's metadata; a model's layers share one
simdattn.VarlenPlan instead (not an op: it holds the checked step).

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
    # Straight to the extension (the schema typed the arguments): the
    # per-call cost a decode step pays.
    _simdattn._C.sdpa(
        q, k, v, out, None, scale, causal, causal_offset, None, window,
        softcap, None if sinks is None else _simdattn._floats(sinks, "sinks"),
        _simdattn._alibi(alibi_slopes),
        None if key_lengths is None else _simdattn._ints(key_lengths,
                                                         "key_lengths"),
        0.0, 0, 0)
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


_POOL = ("str kv_cache_dtype, *, Tensor? key_scales=None, "
         "Tensor? value_scales=None, float k_scale=1.0, float v_scale=1.0, "
         "int value_dim=0")
_STEP = ("Tensor query, Tensor key_cache, Tensor? value_cache, "
         "Tensor query_start_loc, Tensor seq_lens, Tensor block_table, "
         f"{_POOL}, float? scale=None, bool causal=True, int window=0, "
         "float softcap=0.0")


def _pages(key_cache, value_cache, kv_cache_dtype, key_scales, value_scales,
           k_scale, v_scale, value_dim=0):
    return _simdattn.KVPages(key_cache, value_cache, dtype=kv_cache_dtype,
                             value_dim=value_dim, key_scales=key_scales,
                             value_scales=value_scales, key_scale=k_scale,
                             value_scale=v_scale)


def _write_kv_slots(key, value, key_cache, value_cache, slot_mapping,
                    kv_cache_dtype, *, key_scales=None, value_scales=None,
                    k_scale=1.0, v_scale=1.0, value_dim=0):
    pages = _pages(key_cache, value_cache, kv_cache_dtype, key_scales,
                   value_scales, k_scale, v_scale, value_dim)
    _simdattn.write_kv_slots(key, value, pages, slot_mapping)


def _varlen_out(query, key_cache, value_cache, query_start_loc, seq_lens,
                block_table, kv_cache_dtype, *, key_scales=None,
                value_scales=None, k_scale=1.0, v_scale=1.0, scale=None,
                causal=True, window=0, softcap=0.0, value_dim=0, out=None):
    pages = _pages(key_cache, value_cache, kv_cache_dtype, key_scales,
                   value_scales, k_scale, v_scale, value_dim)
    return _simdattn.varlen_attention(
        query, pages, query_start_loc, seq_lens, block_table, out=out,
        scale=scale, causal=causal, window=window, softcap=softcap)


def _varlen(*args, **kwargs):
    return _varlen_out(*args, **kwargs)


_lib.define(f"write_kv_slots(Tensor key, Tensor? value, Tensor(a!) key_cache, "
            f"Tensor(b!)? value_cache, Tensor slot_mapping, {_POOL}) -> ()")
_lib.define(f"varlen_attention({_STEP}) -> Tensor")
_lib.define(f"varlen_attention.out({_STEP}, Tensor(a!) out) -> Tensor(a!)")
_lib.impl("write_kv_slots", _write_kv_slots, "CPU")
_lib.impl("varlen_attention", _varlen, "CPU")
_lib.impl("varlen_attention.out", _varlen_out, "CPU")
