"""Bad inputs: each raises ValueError or TypeError naming the argument, and
leaves every output and cache as it was."""
import numpy as np
import pytest
import torch

import simdattn
import simdattn.torch as st

B, HQ, HK, TQ, TK, D = 2, 4, 2, 3, 5, 8
SENTINEL = 7.0


def qkv():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, HQ, TQ, D, generator=g),
            torch.randn(B, HK, TK, D, generator=g),
            torch.randn(B, HK, TK, D, generator=g))


def fresh_out():
    return torch.full((B, HQ, TQ, D), SENTINEL)


# (id, exception, text the message must hold, call(q, k, v, out)).
SDPA_CASES = [
    ("q_float64", TypeError, "q has dtype torch.float64",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q.double(), k, v, out=o)),
    ("k_float16", TypeError, "k has dtype torch.float16",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k.half(), v, out=o)),
    ("v_numpy_int", TypeError, "v has dtype",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v.numpy().astype(np.int32), out=o)),
    ("q_3d", ValueError, "q must have 4 dimensions",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q[0], k, v, out=o)),
    ("q_list", TypeError, "q must be a numpy array or a CPU torch tensor",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q.tolist(), k, v, out=o)),
    ("q_meta_device", TypeError, "q is on device 'meta'",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         torch.empty(B, HQ, TQ, D, device="meta"), k, v, out=o)),
    ("k_sparse", TypeError, "k has layout",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k.to_sparse(), v, out=o)),
    ("v_last_dim_strided", TypeError, "v's last dimension is not contiguous",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, torch.randn(B, HK, TK, 2 * D)[..., ::2], out=o)),
    ("k_negative_stride", TypeError, "k has a negative stride",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, np.ascontiguousarray(k.numpy())[:, :, ::-1], v, out=o)),
    ("q_requires_grad", TypeError, "q requires grad.*autograd",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q.requires_grad_(), k, v, out=o)),
    ("k_head_dim", ValueError, "k's head_dim",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k[..., :4], v, out=o)),
    ("kv_heads_not_divisor", ValueError, "q's heads",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, torch.randn(B, 3, TK, D), torch.randn(B, 3, TK, D), out=o)),
    ("v_tokens", ValueError, "v ",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v[:, :, :4], out=o)),
    ("k_batch", ValueError, "batch sizes differ",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k[:1], v[:1], out=o)),
    ("out_shape", ValueError, "out has shape",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o[:, :, :2])),
    ("out_overlaps_q", ValueError, "out overlaps q",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         o, k, v, out=o)),
    ("sinks_length", ValueError, "sinks has 3 values but q has 4 heads",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, sinks=[0.0, 1.0, 2.0])),
    ("sinks_nan", ValueError, r"sinks\[1\] is nan",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, sinks=[0.0, float("nan"), 0.0, 0.0])),
    ("alibi_length", ValueError, "alibi has 2 values",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, alibi=[0.5, 0.25])),
    ("key_lengths_count", ValueError, "key_lengths has 1 values",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, key_lengths=[3])),
    ("key_lengths_negative", ValueError, r"key_lengths\[1\] is -1",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, key_lengths=[3, -1])),
    ("key_lengths_too_long", ValueError, r"key_lengths\[0\] is 6",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, key_lengths=[6, 1])),
    ("key_lengths_float", TypeError, r"key_lengths\[0\] is 2.5",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, key_lengths=[2.5, 1])),
    ("causal_offsets_count", ValueError, "causal_offsets has 3 values",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, causal=True, causal_offsets=[0, 1, 2])),
    ("causal_offsets_without_mask", ValueError, "causal_offsets",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, causal_offsets=[0, 1])),
    ("causal_offset_negative", ValueError, "causal_offset is -1",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, causal=True, causal_offset=-1)),
    ("window_negative", ValueError, "window is -2",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, window=-2)),
    ("softcap_negative", ValueError, "softcap is -1",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, softcap=-1.0)),
    ("scale_nan", ValueError, "scale is nan",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, scale=float("nan"))),
    ("scale_string", TypeError, "scale is 'big'",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, scale="big")),
    ("dropout_p_range", ValueError, "dropout_p is 1.5",
     lambda q, k, v, o: simdattn.scaled_dot_product_attention(
         q, k, v, out=o, dropout_p=1.5)),
    ("op_k_head_dim", ValueError, "k's head_dim",
     lambda q, k, v, o: torch.ops.simdattn.sdpa.out(q, k[..., :4], v, out=o)),
    ("op_sinks_length", ValueError, "sinks has 1 values",
     lambda q, k, v, o: torch.ops.simdattn.sdpa.out(
         q, k, v, sinks=torch.zeros(1), out=o)),
]


@pytest.mark.parametrize("name,exc,text,call", SDPA_CASES,
                         ids=[c[0] for c in SDPA_CASES])
def test_sdpa_bad_input(name, exc, text, call):
    q, k, v = qkv()
    out = fresh_out()
    with pytest.raises(exc, match=text):
        call(q, k, v, out)
    assert (out == SENTINEL).all(), "out was written"


def test_read_only_numpy_out():
    q, k, v = (x.numpy() for x in qkv())
    out = np.full((B, HQ, TQ, D), SENTINEL, np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="out is read-only"):
        simdattn.scaled_dot_product_attention(q, k, v, out=out)
    assert (out == SENTINEL).all()


def make_cache():
    cache = simdattn.KVCache(B, HK, 16, D, block_size=16)
    g = torch.Generator().manual_seed(1)
    cache.append(torch.randn(B, HK, 5, D, generator=g),
                 torch.randn(B, HK, 5, D, generator=g))
    cache.append(torch.randn(1, HK, 2, D, generator=g),
                 torch.randn(1, HK, 2, D, generator=g), sequences=[1])
    return cache


def snapshot(cache):
    return cache.lengths, [cache.read(b) for b in range(cache.batch)]


def kv(n, count=B, d=D):
    return torch.randn(count, HK, n, d), torch.randn(count, HK, n, d)


CACHE_CASES = [
    ("append_k_head_dim", ValueError, "k has shape",
     lambda c: c.append(*kv(2, d=4))),
    ("append_v_shape", ValueError, "v has shape",
     lambda c: c.append(kv(2)[0], kv(3)[1])),
    ("append_k_dtype", TypeError, "k has dtype",
     lambda c: c.append(kv(2)[0].double(), kv(2)[1])),
    ("append_over_capacity", ValueError, "capacity",
     lambda c: c.append(*kv(12))),
    ("append_sequences_range", ValueError, r"sequences\[0\] is 5",
     lambda c: c.append(*kv(1, count=1), sequences=[5])),
    ("append_sequences_twice", ValueError, "sequences lists sequence 0 twice",
     lambda c: c.append(*kv(1), sequences=[0, 0])),
    ("append_sequences_count", ValueError, "k has shape",
     lambda c: c.append(*kv(1), sequences=[0])),
    ("truncate_length", ValueError, "length is 9",
     lambda c: c.truncate(0, 9)),
    ("truncate_sequence", ValueError, "sequence is -1",
     lambda c: c.truncate(-1, 0)),
    ("copy_src", ValueError, "src is 2",
     lambda c: c.copy(2, 0)),
    ("copy_dst", ValueError, "dst is 3",
     lambda c: c.copy(0, 3)),
    ("reorder_length", ValueError, "order has 1 entries",
     lambda c: c.reorder([0])),
    ("reorder_range", ValueError, r"order\[1\] is 2",
     lambda c: c.reorder([0, 2])),
    ("attention_q_head_dim", ValueError, "head_dim",
     lambda c: simdattn.attention(torch.randn(B, HQ, 1, 4), c)),
    ("attention_q_batch", ValueError, "q has batch 1",
     lambda c: simdattn.attention(torch.randn(1, HQ, 1, D), c)),
    ("attention_q_heads", ValueError, "q's heads",
     lambda c: simdattn.attention(torch.randn(B, 3, 1, D), c)),
    ("attention_cache_type", TypeError, "cache must be a simdattn.KVCache",
     lambda c: simdattn.attention(torch.randn(B, HQ, 1, D), "cache")),
    ("attention_out_shape", ValueError, "out has shape",
     lambda c: simdattn.attention(torch.randn(B, HQ, 1, D), c,
                                  out=torch.empty(B, HQ, 2, D))),
    ("attention_too_many_queries", ValueError, "ScaledDotProductAttention",
     lambda c: simdattn.attention(torch.randn(B, HQ, 6, D), c)),
]


@pytest.mark.parametrize("name,exc,text,call", CACHE_CASES,
                         ids=[c[0] for c in CACHE_CASES])
def test_cache_bad_input(name, exc, text, call):
    cache = make_cache()
    before = snapshot(cache)
    with pytest.raises(exc, match=text):
        call(cache)
    after = snapshot(cache)
    assert after[0] == before[0]
    for (k0, v0), (k1, v1) in zip(before[1], after[1]):
        assert np.array_equal(k0, k1) and np.array_equal(v0, v1)


@pytest.mark.parametrize("kwargs,exc,text", [
    (dict(dtype="f64"), ValueError, "dtype 'f64' is not a cache type"),
    (dict(block_size=3), ValueError, "block_size"),
    (dict(dtype="q4_0"), ValueError, "head_dim"),
], ids=["dtype", "block_size", "block_type_dims"])
def test_cache_bad_construction(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        simdattn.KVCache(B, HK, 16, D, **kwargs)


def test_cache_negative_size():
    with pytest.raises(ValueError, match="capacity is -1"):
        simdattn.KVCache(B, HK, -1, D)


def test_module_bad_input():
    torch.manual_seed(0)
    mha = st.MultiHeadAttention(3, 4, 6, 0.0, 2)
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        mha(torch.rand(1, 6, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="x has shape"):
        mha(torch.rand(6, 3))
    with pytest.raises(ValueError, match="context_length|tokens"):
        mha(torch.rand(1, 7, 3))  # Longer than context_length.
    with pytest.raises(TypeError, match="x must be a torch tensor"):
        mha([[0.0, 0.0, 0.0]])
