"""simdattn from Python: SIMD CPU attention kernels over numpy arrays and
CPU torch tensors.

The kernels are simdattn's C++ library, reached through the pybind11
extension ``simdattn._simdattn`` (pybind11: C++ exceptions become Python ones
carrying the library's message, std::invalid_argument a ValueError; numpy
arrays are read through the buffer protocol; nothing beyond Debian's
python3-pybind11 is needed to build it). Operands are float32 numpy arrays or
CPU torch tensors, used where they lie (any non-negative strides, the last
dimension contiguous): never copied. The GIL is released while a kernel runs.

    import simdattn
    out = simdattn.scaled_dot_product_attention(q, k, v, causal=True)

``simdattn.torch`` holds drop-in torch.nn.Modules for the seed notebooks'
attention classes. Nothing here computes gradients: a tensor that requires
grad while grad mode is on is refused (TypeError saying so).
"""

import math as _math
import operator as _operator
import sys as _sys

from . import _simdattn as _C

__all__ = [
    "info", "set_num_threads", "get_num_threads", "alibi_slopes",
    "scaled_dot_product_attention", "KVCache", "attention",
]

__version__ = _C.version()


def info():
    """What this build of simdattn is and runs: a dict with its version, the
    SIMD targets compiled, supported by this CPU and active (targets.h), the
    bf16 dot-product kernel, the KV cache element types and the thread
    limit."""
    return {
        "version": _C.version(),
        "compiled_targets": list(_C.compiled_targets()),
        "supported_targets": list(_C.supported_targets()),
        "active_target": _C.active_target(),
        "bf16_dot_kernel": _C.bf16_dot_kernel(),
        "cache_types": list(_C.cache_types()),
        "num_threads": _C.get_num_threads(),
    }


def set_num_threads(n):
    """Limits simdattn's kernels to n threads (a oneTBB global_control the
    module keeps alive); 0 lifts the limit."""
    _C.set_num_threads(_operator.index(n))


def get_num_threads():
    """The threads simdattn's kernels may use now."""
    return _C.get_num_threads()


def alibi_slopes(num_heads):
    """ALiBi's slopes for num_heads heads (BLOOM's and MPT's), a list."""
    return list(_C.alibi_slopes(_operator.index(num_heads)))


def _torch():
    return _sys.modules.get("torch")


def _is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _empty(like, shape):
    """A float32 array of `shape`, a torch tensor when `like` is one."""
    if _is_torch(like):
        return _torch().empty(shape, dtype=_torch().float32)
    import numpy
    return numpy.empty(shape, dtype=numpy.float32)


def _values(x, name):
    """A 1-D sequence (list, tuple, numpy array, torch tensor) as a list."""
    if x is None:
        return None
    if _is_torch(x):
        torch = _torch()
        if x.requires_grad and torch.is_grad_enabled():
            raise TypeError(
                f"{name} requires grad: simdattn does not support autograd "
                f"(it computes no backward); call it under torch.no_grad() "
                f"or pass {name}.detach()")
        if x.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}")
        return x.tolist()
    if hasattr(x, "ndim") and hasattr(x, "tolist"):
        if x.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}")
        return x.tolist()
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"{name} must be a sequence, not "
                        f"{type(x).__name__}") from None


def _ints(x, name):
    values = _values(x, name)
    if values is None:
        return None
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or isinstance(v, float):
            raise TypeError(f"{name}[{i}] is {v!r}: expected an integer")
        try:
            out.append(_operator.index(v))
        except TypeError:
            raise TypeError(f"{name}[{i}] is {v!r}: expected an integer") \
                from None
    return out


def _floats(x, name):
    values = _values(x, name)
    if values is None:
        return None
    out = []
    for i, v in enumerate(values):
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            raise TypeError(f"{name}[{i}] is {v!r}: expected a number") \
                from None
    return out


def _int(x, name):
    if isinstance(x, bool) or isinstance(x, float):
        raise TypeError(f"{name} is {x!r}: expected an integer")
    try:
        return _operator.index(x)
    except TypeError:
        raise TypeError(f"{name} is {x!r}: expected an integer") from None


def _float(x, name):
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} is {x!r}: expected a number") from None
    return v


def _alibi(alibi):
    if alibi is None or alibi is False:
        return None
    if alibi is True:
        return True
    return _floats(alibi, "alibi")


def _shape(x, name):
    shape = getattr(x, "shape", None)
    if shape is None:
        raise TypeError(f"{name} must be a numpy array or a CPU torch tensor, "
                        f"not {type(x).__name__}")
    return tuple(shape)


def _out_and_lse(q, out, return_lse, value_dim, name_dims):
    qs = _shape(q, "q")
    if len(qs) != 4:
        raise ValueError(f"q must have 4 dimensions {name_dims}, got shape "
                         f"{qs}")
    if out is None:
        out = _empty(q, (qs[0], qs[1], qs[2], value_dim))
    lse = _empty(q, (qs[0], qs[1], qs[2])) if return_lse else None
    return out, lse


def scaled_dot_product_attention(q, k, v, *, out=None, scale=None,
                                 causal=False, causal_offset=0,
                                 causal_offsets=None, window=0, softcap=0.0,
                                 sinks=None, alibi=None, key_lengths=None,
                                 dropout_p=0.0, dropout_seed=0,
                                 dropout_offset=0, return_lse=False):
    """softmax(scale * q k^T + mask) v, fused (the weights never stored).

    q (batch, q_heads, q_tokens, head_dim), k (batch, kv_heads, k_tokens,
    head_dim), v (batch, kv_heads, k_tokens, value_dim): float32 numpy arrays
    or CPU torch tensors, any strides with the last dimension contiguous
    (a projection's (b, T, h, D) output transposed to (b, h, T, D) is read in
    place). kv_heads may divide q_heads (grouped-query attention: query head
    h reads key/value head h // (q_heads // kv_heads)).

    out: where to write (batch, q_heads, q_tokens, value_dim); allocated
        (torch if q is torch, else numpy) when None. Returned.
    scale: multiplies q k^T; None: 1 / sqrt(head_dim).
    causal, causal_offset: query i sits at position i + causal_offset among
        the keys (with a KV cache of n keys and m new queries, n - m) and
        sees keys j <= its position; causal_offsets gives one offset per
        batch item instead.
    window: > 0 makes it a causal sliding window of that many keys.
    softcap: > 0 caps the scaled scores: softcap * tanh(s / softcap).
    sinks: one logit per query head (gpt-oss), added to the denominator.
    alibi: True for ALiBi's slopes of q_heads heads, or one slope per head.
    key_lengths: per batch item, the keys it sees (padding).
    dropout_p, dropout_seed, dropout_offset: dropout on the weights with
        simdattn's Philox bits (not torch's generator).
    return_lse: also return each row's log-sum-exp (batch, q_heads,
        q_tokens).

    Raises ValueError (shapes, values; the message names the argument),
    TypeError (dtype, layout, device, requires_grad). On error nothing is
    written.
    """
    kshape = _shape(k, "k")
    _shape(v, "v")
    vshape = _shape(v, "v")
    if len(vshape) != 4:
        raise ValueError("v must have 4 dimensions (batch, kv_heads, "
                         f"k_tokens, value_dim), got shape {vshape}")
    del kshape
    out, lse = _out_and_lse(q, out, return_lse, vshape[3],
                            "(batch, q_heads, q_tokens, head_dim)")
    _C.sdpa(q, k, v, out, lse,
            None if scale is None else _float(scale, "scale"),
            bool(causal), _int(causal_offset, "causal_offset"),
            _ints(causal_offsets, "causal_offsets"),
            _int(window, "window"), _float(softcap, "softcap"),
            _floats(sinks, "sinks"), _alibi(alibi),
            _ints(key_lengths, "key_lengths"),
            _float(dropout_p, "dropout_p"), _int(dropout_seed, "dropout_seed"),
            _int(dropout_offset, "dropout_offset"))
    return (out, lse) if return_lse else out


class KVCache(_C.KVCache):
    """The keys and values of the tokens seen so far, for one attention
    layer: `batch` sequences of kv_heads x head_dim keys and values per
    token, each with its own length, up to `capacity`.

    KVCache(batch, kv_heads, capacity, head_dim, *, dtype="f32",
            block_size=0, num_blocks=0, value_dim=0, key_scale=1.0,
            value_scale=1.0, window=0)

    dtype: any of info()["cache_types"] (f32, bf16, f16, int8, fp8,
    fp8e5m2, q8_0, q4_0, q4_1, iq4_nl); block_size > 0 makes it paged
    (a power of two, 16 to 256). Keys and values are converted as they are
    appended; attention reads them where they lie.
    """

    def append(self, k, v, sequences=None):
        """Appends n tokens: k (b, kv_heads, n, head_dim) and v (b, kv_heads,
        n, value_dim), float32; b = batch, or len(sequences) when given
        (k[i] and v[i] go to sequence sequences[i], distinct). Nothing
        changes on error."""
        self._append(k, v, _ints(sequences, "sequences"))

    def read(self, sequence):
        """A sequence's keys and values as attention sees them (widened or
        dequantized), numpy arrays (kv_heads, length, head_dim) and
        (kv_heads, length, value_dim)."""
        import numpy
        n = self.length(sequence)
        keys = numpy.empty((self.kv_heads, n, self.head_dim), numpy.float32)
        values = numpy.empty((self.kv_heads, n, self.value_dim),
                             numpy.float32)
        self._read(sequence, keys, values)
        return keys, values

    def attention(self, q, **kwargs):
        """attention(q, self, **kwargs)."""
        return attention(q, self, **kwargs)

    def __repr__(self):
        return (f"simdattn.KVCache(batch={self.batch}, "
                f"kv_heads={self.kv_heads}, capacity={self.capacity}, "
                f"head_dim={self.head_dim}, dtype={self.dtype!r}, "
                f"block_size={self.block_size}, lengths={self.lengths})")


def attention(q, cache, *, out=None, scale=None, causal=True, window=0,
              softcap=0.0, sinks=None, alibi=None, return_lse=False):
    """Attention of q (batch, q_heads, q_tokens, head_dim) over a KVCache:
    each sequence's queries are its last q_tokens tokens (decode: one), so
    `causal` (True by default, unlike scaled_dot_product_attention) and
    `window` count positions from there, and the cache gives the key
    lengths. Other arguments as scaled_dot_product_attention's."""
    if not isinstance(cache, _C.KVCache):
        raise TypeError(f"cache must be a simdattn.KVCache, not "
                        f"{type(cache).__name__}")
    out, lse = _out_and_lse(q, out, return_lse, cache.value_dim,
                            "(batch, q_heads, q_tokens, head_dim)")
    _C.cache_attention(q, cache, out, lse,
                       None if scale is None else _float(scale, "scale"),
                       bool(causal), _int(window, "window"),
                       _float(softcap, "softcap"), _floats(sinks, "sinks"),
                       _alibi(alibi))
    return (out, lse) if return_lse else out


del _math
