"""The kernels beside attention from Python: matmul (B of every float dtype,
transposed, packed, bf16 arithmetic), apply_rope, and a KVCache sequence's
export and import."""
import numpy as np
import pytest
import torch

import simdattn


def test_matmul_every_b_dtype_and_layout():
    torch.manual_seed(1)
    a = torch.randn(37, 70)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        b = torch.randn(70, 45).to(dtype)
        want = a.double() @ b.double()
        got = simdattn.matmul(a, b)
        assert got.shape == (37, 45) and got.dtype == torch.float32
        assert (got.double() - want).abs().max() < 1e-4
        bt = b.t().contiguous()  # nn.Linear's weight: (out, in).
        got_t = simdattn.matmul(a, bt, transpose_b=True)
        assert (got_t.double() - want).abs().max() < 1e-4
        packed = simdattn.PackedMatrix(bt, transpose_b=True)
        assert packed.shape == (70, 45)
        assert (simdattn.matmul(a, packed).double() - want).abs().max() < 1e-4
    # out= and alpha, numpy operands.
    an, bn = a.numpy(), np.ones((70, 3), np.float32)
    out = np.empty((37, 3), np.float32)
    assert simdattn.matmul(an, bn, out=out, alpha=0.5) is out
    assert np.allclose(out, 0.5 * an.sum(1, keepdims=True), atol=1e-4)


def test_matmul_bf16_arithmetic_is_within_its_bound():
    torch.manual_seed(2)
    a, b = torch.randn(64, 256), torch.randn(256, 32)
    ar = a.to(torch.bfloat16).double()
    br = b.to(torch.bfloat16).double()
    exact = ar @ br
    bound = 256 * 2.0**-24 * (ar.abs() @ br.abs()) + 1e-30
    for b_op in (b, simdattn.PackedMatrix(b, compute="bf16")):
        got = simdattn.matmul(a, b_op, compute="bf16").double()
        assert ((got - exact).abs() <= bound).all()


def test_matmul_errors_name_the_argument():
    a = torch.randn(4, 8)
    with pytest.raises(ValueError, match="MatMul"):
        simdattn.matmul(a, torch.randn(9, 3), out=torch.empty(4, 3))
    with pytest.raises(TypeError, match="b has dtype torch.int32"):
        simdattn.matmul(a, torch.zeros(8, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="compute is 'f8'"):
        simdattn.matmul(a, torch.randn(8, 3), compute="f8")


def hf_rope(x, positions, theta, interleaved):
    """Hugging Face's rotate_half (or GPT-J's pairs) in float64."""
    x = x.double()
    b, h, t, d = x.shape
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pos = torch.arange(t, dtype=torch.float64)[None, :] + \
        torch.tensor(positions, dtype=torch.float64)[:, None]
    ang = pos[:, None, :, None] * inv  # (b, 1, t, d/2)
    cos, sin = ang.cos(), ang.sin()
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x2 * cos + x1 * sin
        return out
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rope_is_hugging_faces(interleaved):
    torch.manual_seed(3)
    x = torch.randn(2, 3, 10, 64)
    want = hf_rope(x, [0, 4000], 10000.0, interleaved)
    got = simdattn.apply_rope(x.clone(), [0, 4000], interleaved=interleaved)
    assert (got.double() - want).abs().max() < 1e-5


@pytest.mark.parametrize("dtype", ["bf16", "q8_0", "int8"])
def test_cache_export_import_moves_a_sequence_bit_for_bit(dtype):
    torch.manual_seed(4)
    k, v = torch.randn(1, 2, 40, 64), torch.randn(1, 2, 40, 64)
    src = simdattn.KVCache(1, 2, 64, 64, dtype=dtype)
    src.append(k, v)
    data = src.export(0)
    dst = simdattn.KVCache(2, 2, 64, 64, dtype=dtype, block_size=16)
    dst.import_(1, data)
    assert dst.lengths == [0, 40]
    q = torch.randn(1, 4, 1, 64)
    a = simdattn.attention(q, src)
    b = simdattn.attention(torch.cat([q, q]), dst)[1:]
    assert torch.equal(a, b)
    # A flipped byte, or a cache of another type: refused, nothing appended.
    bad = bytearray(data)
    bad[100] ^= 1
    with pytest.raises(ValueError, match="checksum"):
        dst.import_(0, bytes(bad))
    other = simdattn.KVCache(1, 2, 64, 64, dtype="f16")
    with pytest.raises(ValueError):
        other.import_(0, data)
    assert dst.lengths == [0, 40] and other.lengths == [0]
    # A window of the sequence.
    part = src.export(0, first=8, count=16)
    dst.import_(0, part)
    assert dst.lengths == [16, 40]
    keys, _ = dst.read(0)
    want, _ = src.read(0)
    assert np.array_equal(keys, want[:, 8:24])


def test_cache_rotates_keys_on_append_as_apply_rope():
    torch.manual_seed(6)
    k, v = torch.randn(1, 2, 9, 64), torch.randn(1, 2, 9, 64)
    cache = simdattn.KVCache(1, 2, 32, 64, rope_theta=10000.0)
    cache.append(k[:, :, :5], v[:, :, :5])
    cache.append(k[:, :, 5:], v[:, :, 5:])
    keys, values = cache.read(0)
    rotated = simdattn.apply_rope(k.clone())
    assert np.array_equal(keys, rotated[0].numpy())
    assert np.array_equal(values, v[0].numpy())
