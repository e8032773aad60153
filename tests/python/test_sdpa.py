"""simdattn.scaled_dot_product_attention and KVCache against a float64 torch
reference (reference.py), over numpy arrays and torch tensors."""
import numpy as np
import pytest
import torch

import simdattn
from reference import attention as ref_attention

ATOL = 2e-6
RTOL = 2e-5


def rand(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(torch.float32)


def check(out, ref, atol=ATOL, rtol=RTOL):
    out = torch.as_tensor(np.asarray(out)) if isinstance(out, np.ndarray) \
        else out
    torch.testing.assert_close(out.to(torch.float64), ref, atol=atol,
                               rtol=rtol)


def test_info_and_threads():
    info = simdattn.info()
    assert info["version"] == simdattn.__version__
    assert info["active_target"] in info["supported_targets"]
    assert set(info["supported_targets"]) <= set(info["compiled_targets"])
    assert "bf16" in info["cache_types"] and "q4_0" in info["cache_types"]
    simdattn.set_num_threads(1)
    assert simdattn.get_num_threads() == 1
    q, k, v = rand(1, 2, 9, 16, seed=1), rand(1, 2, 9, 16, seed=2), \
        rand(1, 2, 9, 16, seed=3)
    one = simdattn.scaled_dot_product_attention(q, k, v, causal=True)
    simdattn.set_num_threads(0)
    assert simdattn.get_num_threads() >= 1
    many = simdattn.scaled_dot_product_attention(q, k, v, causal=True)
    assert torch.equal(one, many)
    assert info["cpu"] and isinstance(info["policy_rules"], list)
    # The last call: 2 heads of 9 rows over 9 keys, f32 as given.
    plan = simdattn.last_attention_plan()
    assert plan[0].startswith("target " + info["active_target"] + ", f32")
    assert any("2 tasks of 1 query head" in line for line in plan), plan
    assert plan[-1] == "policy: the table"


def test_plan_files(tmp_path):
    """A plan file from this machine loads, its knobs listed among the
    rules, and changes no bit; one from another CPU is a ValueError naming
    both, and leaves the loaded one."""
    info = simdattn.info()
    q, k, v = rand(1, 4, 70, 16, seed=1), rand(1, 4, 70, 16, seed=2), \
        rand(1, 4, 70, 16, seed=3)
    table = simdattn.scaled_dot_product_attention(q, k, v, causal=True)
    good = tmp_path / "plans.txt"
    good.write_text("simdattn %s\ncpu %s\nmatmul_task_tiles 2  # test\n" %
                    (info["version"], info["cpu"]))
    simdattn.load_plans(good)
    try:
        assert simdattn.info()["policy_rules"][-1].startswith(
            "matmul_task_tiles = 2: tuned (%s), test" % good)
        tuned = simdattn.scaled_dot_product_attention(q, k, v, causal=True)
        assert torch.equal(tuned, table)
        assert simdattn.last_attention_plan()[-1] == \
            "policy: the table and plan file %s" % good
        other = tmp_path / "other.txt"
        other.write_text("simdattn %s\ncpu Some other CPU\n" %
                         info["version"])
        with pytest.raises(ValueError, match="tuned on \"Some other CPU\""):
            simdattn.load_plans(other)
        assert simdattn.info()["policy_rules"][-1].startswith(
            "matmul_task_tiles = 2")
    finally:
        simdattn.load_plans("")
    assert simdattn.info()["policy_rules"] == info["policy_rules"]


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_plain_and_out(kind):
    q, k, v = rand(2, 4, 7, 16, seed=1), rand(2, 4, 11, 16, seed=2), \
        rand(2, 4, 11, 24, seed=3)
    ref, _ = ref_attention(q, k, v)
    if kind == "numpy":
        q, k, v = q.numpy(), k.numpy(), v.numpy()
        out = np.full((2, 4, 7, 24), np.nan, np.float32)
    else:
        out = torch.full((2, 4, 7, 24), float("nan"))
    got = simdattn.scaled_dot_product_attention(q, k, v, out=out)
    assert got is out
    check(out, ref)
    fresh = simdattn.scaled_dot_product_attention(q, k, v)
    assert type(fresh) is type(out)
    check(fresh, ref)


@pytest.mark.parametrize("case", [
    dict(causal=True),
    dict(causal=True, causal_offset=4),
    dict(causal=True, causal_offsets=[0, 3]),
    dict(window=3),
    dict(window=2, causal_offset=4),
    dict(softcap=2.0, scale=0.9),
    dict(sinks=[0.5, -1.0, 2.0, 0.0]),
    dict(alibi=True, causal=True, causal_offset=4),
    dict(alibi=[0.5, 0.25, 0.125, 0.0625]),
    dict(key_lengths=[5, 11]),
    dict(key_lengths=[0, 3], sinks=[0.5, -1.0, 2.0, 0.0]),
    dict(key_lengths=[0, 3]),
    dict(causal=True, causal_offset=4, window=4, softcap=3.0, sinks=[
        0.1, 0.2, 0.3, 0.4], alibi=True, key_lengths=[9, 10]),
], ids=lambda c: ",".join(c))
def test_mask_variants_and_lse(case):
    q = rand(2, 4, 7, 16, seed=4, scale=2.0)
    k = rand(2, 2, 11, 16, seed=5)  # Grouped-query: 2 kv heads.
    v = rand(2, 2, 11, 16, seed=6)
    out, lse = simdattn.scaled_dot_product_attention(q, k, v, **case,
                                                     return_lse=True)
    ref_case = dict(case)
    if ref_case.get("alibi") is True:
        ref_case["alibi"] = simdattn.alibi_slopes(4)
    ref, ref_lse = ref_attention(q, k, v, **ref_case)
    check(out, ref)
    assert lse.shape == (2, 4, 7)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    check(lse[finite], ref_lse[finite], atol=1e-5)
    assert (lse[~finite] == -float("inf")).all()


def test_strided_views_in_place():
    # A projection's (b, T, h, D) output viewed as (b, h, T, D): no copy.
    b, t, h, d = 2, 9, 3, 8
    qkv = rand(b, t, 3 * h * d, seed=7)
    q = qkv[..., : h * d].view(b, t, h, d).transpose(1, 2)
    k = qkv[..., h * d: 2 * h * d].view(b, t, h, d).transpose(1, 2)
    v = qkv[..., 2 * h * d:].view(b, t, h, d).transpose(1, 2)
    assert not q.is_contiguous()
    out = torch.zeros(b, t, h, d).transpose(1, 2)  # Written in place too.
    simdattn.scaled_dot_product_attention(q, k, v, out=out, causal=True)
    ref, _ = ref_attention(q, k, v, causal=True)
    check(out, ref)
    # Broadcast keys (stride 0 over batch) are read as they are.
    k1 = rand(1, h, t, d, seed=8).expand(b, h, t, d)
    v1 = rand(1, h, t, d, seed=9).expand(b, h, t, d)
    got = simdattn.scaled_dot_product_attention(q, k1, v1)
    check(got, ref_attention(q, k1, v1)[0])


def test_dropout_extremes_and_determinism():
    q, k, v = rand(1, 2, 5, 8, seed=1), rand(1, 2, 5, 8, seed=2), \
        rand(1, 2, 5, 8, seed=3)
    zeros = simdattn.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert (zeros == 0).all()
    a = simdattn.scaled_dot_product_attention(q, k, v, dropout_p=0.5,
                                              dropout_seed=7)
    b = simdattn.scaled_dot_product_attention(q, k, v, dropout_p=0.5,
                                              dropout_seed=7)
    c = simdattn.scaled_dot_product_attention(q, k, v, dropout_p=0.5,
                                              dropout_seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_no_grad_accepts_requires_grad():
    q = rand(1, 2, 5, 8, seed=1).requires_grad_()
    k, v = rand(1, 2, 5, 8, seed=2), rand(1, 2, 5, 8, seed=3)
    with torch.no_grad():
        out = simdattn.scaled_dot_product_attention(q, k, v)
    check(out, ref_attention(q, k, v)[0])


# --- KV caches -------------------------------------------------------------


def test_cache_decode_matches_sdpa():
    b, hk, hq, d, cap = 2, 2, 4, 32, 64
    cache = simdattn.KVCache(b, hk, cap, d)
    keys, values = rand(b, hk, 20, d, seed=10), rand(b, hk, 20, d, seed=11)
    cache.append(keys[:, :, :17], values[:, :, :17])
    cache.append(keys[:, :, 17:], values[:, :, 17:])
    assert cache.lengths == [20, 20]
    q = rand(b, hq, 1, d, seed=12)
    out, lse = simdattn.attention(q, cache, return_lse=True)
    ref, ref_lse = ref_attention(q, keys, values)
    check(out, ref)
    check(lse, ref_lse, atol=1e-5)
    # A prefill chunk: the last 3 tokens, causal from their positions.
    q3 = rand(b, hq, 3, d, seed=13)
    out3 = cache.attention(q3)
    check(out3, ref_attention(q3, keys, values, causal=True,
                              causal_offset=17)[0])
    k_read, v_read = cache.read(1)
    assert np.array_equal(k_read, keys[1].numpy())
    assert np.array_equal(v_read, values[1].numpy())


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_cache_16bit_is_attention_over_widened(dtype):
    b, h, d = 1, 2, 16
    cache = simdattn.KVCache(b, h, 32, d, dtype=dtype)
    keys, values = rand(b, h, 10, d, seed=14), rand(b, h, 10, d, seed=15)
    cache.append(keys, values)
    assert cache.dtype == dtype
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    kw, vw = keys.to(tdt).float(), values.to(tdt).float()
    k_read, v_read = cache.read(0)
    assert np.array_equal(k_read, kw[0].numpy())
    q = rand(b, h, 1, d, seed=16)
    check(simdattn.attention(q, cache), ref_attention(q, kw, vw)[0])


def test_paged_equals_contiguous_and_sequence_ops():
    b, h, d = 3, 2, 32
    dense = simdattn.KVCache(b, h, 64, d)
    paged = simdattn.KVCache(b, h, 64, d, block_size=16)
    k, v = rand(b, h, 40, d, seed=17), rand(b, h, 40, d, seed=18)
    for cache in (dense, paged):
        cache.append(k[:, :, :30], v[:, :, :30])
        cache.append(k[[0, 2], :, 30:], v[[0, 2], :, 30:], sequences=[0, 2])
        cache.truncate(2, 25)
        cache.copy(0, 1)
        cache.reorder([1, 0, 2])
    assert dense.lengths == paged.lengths == [40, 40, 25]
    q = rand(b, 4, 1, d, seed=19)
    a, bb = simdattn.attention(q, dense), simdattn.attention(q, paged)
    assert torch.equal(a, bb)
    ref0, _ = ref_attention(q[:1], k[:1], v[:1])
    check(a[:1], ref0)
    ref2, _ = ref_attention(q[2:], k[2:, :, :25], v[2:, :, :25])
    check(a[2:], ref2)
    dense.clear()
    assert dense.lengths == [0, 0, 0]


def test_quantized_cache_runs():
    cache = simdattn.KVCache(1, 2, 64, 32, dtype="q8_0", block_size=16)
    k, v = rand(1, 2, 20, 32, seed=20), rand(1, 2, 20, 32, seed=21)
    cache.append(k, v)
    q = rand(1, 2, 1, 32, seed=22)
    ref, _ = ref_attention(q, k, v)
    check(simdattn.attention(q, cache), ref, atol=3e-2, rtol=0)
