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
    "scaled_dot_product_attention", "KVCache", "attention", "KVPages",
    "allocate_kv_pages", "write_kv_slots", "varlen_attention", "VarlenPlan",
    "PackedMatrix", "matmul", "apply_rope", "last_attention_plan",
    "load_plans",
]

__version__ = _C.version()


def info():
    """What this build of simdattn is and runs: a dict with its version, the
    SIMD targets compiled, supported by this CPU and active (targets.h), the
    bf16 dot-product kernel, the KV cache element types, the thread limit,
    the CPU as the kernels see it and the policy rules that apply to it."""
    return {
        "version": _C.version(),
        "compiled_targets": list(_C.compiled_targets()),
        "supported_targets": list(_C.supported_targets()),
        "active_target": _C.active_target(),
        "bf16_dot_kernel": _C.bf16_dot_kernel(),
        "cache_types": list(_C.cache_types()),
        "num_threads": _C.get_num_threads(),
        "cpu": _C.cpu_summary(),
        "policy_rules": list(_C.policy_rules()),
    }


def last_attention_plan():
    """How this thread's last attention call ran, one line per decision:
    target, cache type and arithmetic, tasks and key splits, and the
    products that served them (targets.h's LastAttentionPlan); [] before
    the first."""
    return list(_C.last_attention_plan())


def load_plans(path):
    """Loads a plan file written by ``simdattn tune`` on this machine (knobs
    that change speed, never results; the policy table keeps the rest), or
    goes back to the table for ``""``. ValueError for a file made on another
    CPU or library version (naming both) or a malformed one; the policy is
    as it was then. Call it while no kernel runs."""
    _C.load_plans(str(path))


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


def _mask_options(scale, causal, window, softcap, sinks, alibi):
    """The extension's (scale, causal, window, softcap, sinks, alibi), as
    every attention over a cache or pages takes them."""
    return (None if scale is None else _float(scale, "scale"), bool(causal),
            _int(window, "window"), _float(softcap, "softcap"),
            _floats(sinks, "sinks"), _alibi(alibi))


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
            value_scale=1.0, window=0, rope_theta=None, rotary_dim=0,
            rotary_offset=0, interleaved=False)

    dtype: any of info()["cache_types"] (f32, bf16, f16, int8, fp8,
    fp8e5m2, q8_0, q4_0, q4_1, iq4_nl); block_size > 0 makes it paged
    (a power of two, 16 to 256). Keys and values are converted as they are
    appended; attention reads them where they lie. rope_theta: keys are
    rotated on append at their positions in the sequence (apply_rope's
    options).
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
                       *_mask_options(scale, causal, window, softcap, sinks,
                                      alibi))
    return (out, lse) if return_lse else out


# ---------------------------------------------------------------------------
# Serving over caller-owned pools, with vLLM's conventions.

KVPages = _C.KVPages
KVPages.__doc__ = """A pool of KV blocks in the caller's tensors (kernels.h's
KVPages): key_cache and value_cache (num_blocks, kv_heads, block_size, row),
slot s = block * block_size + offset, in the dtype's own element type
(float32, bfloat16, float16, int8) or as uint8 bytes (fp8, fp8e5m2 and
ggml's blocks q8_0, q4_0, q4_1, iq4_nl, whose rows are ggml's blocks byte
for byte). Any strides, the last dimension contiguous; value_cache takes
key_cache's. value_cache None: a latent pool (MLA), each key row's first
value_dim elements its value. int8: key_scales and value_scales float32
(num_blocks, kv_heads, block_size); fp8: key_scale and value_scale.

KVPages(key_cache, value_cache, *, dtype, head_dim=0, value_dim=0,
        key_scales=None, value_scales=None, key_scale=1.0, value_scale=1.0)

head_dim 0: the rows' length; value_dim 0: head_dim. The tensors are kept
alive and used where they lie."""


def allocate_kv_pages(dtype, num_blocks, block_size, kv_heads, head_dim,
                      value_dim=0, *, latent=False):
    """A dense KVPages with zeroed torch tensors (num_blocks, kv_heads,
    block_size, row) of the dtype's storage (uint8 bytes for fp8 and ggml's
    blocks), row the longer of head_dim and value_dim; latent: no value
    cache (value_dim < head_dim)."""
    torch = _torch()
    if torch is None:
        import torch
    nbytes, nvalues = _C.element_size(dtype)
    row = max(head_dim, value_dim)
    storage = {"f32": torch.float32, "bf16": torch.bfloat16,
               "f16": torch.float16, "int8": torch.int8}.get(dtype)
    if storage is None:
        storage = torch.uint8
        if row % nvalues != 0:
            raise ValueError(f"{dtype} stores blocks of {nvalues} elements: "
                             f"head_dim ({head_dim}) and value_dim "
                             f"({value_dim}) must be multiples of them")
        row = row // nvalues * nbytes
    shape = (num_blocks, kv_heads, block_size, row)
    keys = torch.zeros(shape, dtype=storage)
    values = None if latent else torch.zeros(shape, dtype=storage)
    scales = {}
    if dtype == "int8":
        scales["key_scales"] = torch.zeros(shape[:3], dtype=torch.float32)
        if not latent:
            scales["value_scales"] = torch.zeros(shape[:3],
                                                 dtype=torch.float32)
    return KVPages(keys, values, dtype=dtype, head_dim=head_dim,
                   value_dim=value_dim, **scales)


def _step_out(query, out, return_lse, value_dim):
    qs = _shape(query, "query")
    if len(qs) != 3:
        raise ValueError("query must have 3 dimensions (num_tokens, q_heads, "
                         f"head_dim), got shape {qs}")
    if out is None:
        out = _empty(query, (qs[0], qs[1], value_dim))
    lse = _empty(query, (qs[1], qs[0])) if return_lse else None
    return out, lse


def write_kv_slots(key, value, pages, slot_mapping, *, positions=None,
                   rope_theta=None, rotary_dim=0, rotary_offset=0,
                   interleaved=False):
    """vLLM's reshape_and_cache: key (num_tokens, kv_heads, head_dim) and
    value (num_tokens, kv_heads, value_dim; None for a latent pool), float32,
    token t stored at slot_mapping[t] (negative: skipped; the others
    distinct), converted to the pool's dtype. rope_theta: rotate each key
    first at positions[t] (RoPE; rotary_dim 0: all dims from rotary_offset;
    interleaved: GPT-J pairs). Nothing is written on error."""
    _C.write_kv_slots(key, value, pages, slot_mapping, positions=positions,
                      rope_theta=rope_theta, rotary_dim=rotary_dim,
                      rotary_offset=rotary_offset, interleaved=interleaved)


def varlen_attention(query, pages, query_start_loc, seq_lens, block_table, *,
                     out=None, scale=None, causal=True, window=0, softcap=0.0,
                     sinks=None, alibi=None, tree_bits=None,
                     tree_offsets=None, return_lse=False):
    """One serving step's attention (vLLM's and FlashInfer's varlen
    conventions): query (num_tokens, q_heads, head_dim) float32, sequence
    b's queries rows [query_start_loc[b], query_start_loc[b + 1]), its last
    tokens, over the seq_lens[b] tokens in the pool's blocks block_table[b]
    (num_seqs, max_blocks; -1: released). out (num_tokens, q_heads,
    value_dim); lse (q_heads, num_tokens). Draft trees (speculative
    verification): tree_bits and tree_offsets. Options as attention()'s.
    Checks the metadata at every call: a step of many layers plans it once
    (VarlenPlan)."""
    out, lse = _step_out(query, out, return_lse, pages.value_dim)
    _C.varlen_attention(query, pages, query_start_loc, seq_lens, block_table,
                        out, lse,
                        *_mask_options(scale, causal, window, softcap,
                                       sinks, alibi),
                        tree_bits, tree_offsets)
    return (out, lse) if return_lse else out


class VarlenPlan(_C.VarlenPlan):
    """A serving step planned once for all its layers (FlashInfer's
    plan / run, kernels.h's VarlenPlan): the metadata is copied and checked
    against the pools' shape once (query_start_loc, seq_lens, block_table
    entries, slot_mapping's slots, positions, trees); each layer's write()
    and attention() then check only their own tensors, with the bits of
    write_kv_slots and varlen_attention.

    VarlenPlan(pages, query_start_loc, seq_lens, block_table, *,
               slot_mapping=None, positions=None, tree_bits=None,
               tree_offsets=None, max_window=0)

    pages: any layer's KVPages (its shape). positions: each token's (RoPE;
    None: each sequence's new tokens at its last positions). max_window: the
    largest window of the layers' attention calls, 0 where one has none.
    """

    def attention(self, query, pages, *, out=None, scale=None, causal=True,
                  window=0, softcap=0.0, sinks=None, alibi=None,
                  return_lse=False):
        """This layer's attention over `pages` (varlen_attention's)."""
        out, lse = _step_out(query, out, return_lse, pages.value_dim)
        self._attention(query, pages, out, lse,
                        *_mask_options(scale, causal, window, softcap, sinks,
                                       alibi))
        return (out, lse) if return_lse else out


# ---------------------------------------------------------------------------
# The kernels beside attention.

PackedMatrix = _C.PackedMatrix
PackedMatrix.__doc__ = """op(B) prepared once for many matmul calls (a layer's
weights): PackedMatrix(b, *, transpose_b=False, compute="f32"), b float32,
bfloat16 or float16 (K x N, or N x K with transpose_b: nn.Linear's weight).
compute "bf16" keeps it as bf16 pairs for the CPU's bf16 dot products."""


def matmul(a, b, *, out=None, transpose_b=False, compute="f32", alpha=1.0):
    """out = alpha * a @ op(b): a float32 (M, K); b float32, bfloat16 or
    float16 (K, N), or (N, K) with transpose_b, or a PackedMatrix (its own
    transpose and compute). compute "bf16": operands rounded to bf16, sums
    in float32 (the README's bound). out (M, N) float32, allocated when
    None. Returned."""
    ashape = _shape(a, "a")
    if isinstance(b, PackedMatrix):
        n = b.shape[1]
    else:
        bshape = _shape(b, "b")
        if len(bshape) != 2:
            raise ValueError(f"b must have 2 dimensions, got shape {bshape}")
        n = bshape[0] if transpose_b else bshape[1]
    if len(ashape) != 2:
        raise ValueError(f"a must have 2 dimensions, got shape {ashape}")
    if out is None:
        out = _empty(a, (ashape[0], n))
    _C.matmul(a, b, out, bool(transpose_b), compute, _float(alpha, "alpha"))
    return out


def apply_rope(x, positions=None, *, theta=10000.0, rotary_dim=0,
               rotary_offset=0, interleaved=False):
    """Rotary embeddings in place on x (batch, heads, tokens, head_dim)
    float32: token t of batch item b at position positions[b] + t (None:
    t). rotary_dim 0 rotates every dim from rotary_offset on; interleaved:
    GPT-J's pairs (2i, 2i + 1) instead of NeoX's halves. Angles in double,
    cos and sin rounded once (kernels.h's ApplyRope). Returns x."""
    _C.apply_rope(x, _ints(positions, "positions"), _float(theta, "theta"),
                  _int(rotary_dim, "rotary_dim"),
                  _int(rotary_offset, "rotary_offset"), bool(interleaved))
    return x


del _math
