#!/usr/bin/python3
"""Writes tests/data/mla/: PyTorch golden cases for DeepSeek-V2/V3's
Multi-head Latent Attention (MLA) layer over one causal sequence.

    /usr/bin/python3 tests/data/make_mla_golden.py

The layer is written plainly in float64 (from float32 weights and inputs) from
Hugging Face's modeling_deepseek.py DeepseekV2Attention (eager, no rope
scaling, so no yarn mscale; no biases), for hidden states x (T, hidden) at
positions 0..T-1:

  queries   q = q_proj(x)                                 if q_lora_rank == 0
            q = q_b_proj(RMSNorm_q(q_a_proj(x)))          otherwise,
            viewed (T, H, nope + rope): q_nope = the first qk_nope_head_dim,
            q_pe = the last qk_rope_head_dim of each head;
  latent    ckv = kv_a_proj_with_mqa(x) (T, kv_lora_rank + rope):
            compressed = ckv[:, :kv_lora_rank], k_pe = ckv[:, kv_lora_rank:]
            (one rope key head, shared by every head);
  keys/vals kv = kv_b_proj(RMSNorm_kv(compressed)) viewed (T, H, nope + v):
            k_nope = the first qk_nope_head_dim, value = the last v_head_dim;
  RMSNorm   n(z) = z * rsqrt(mean(z^2 over the last dim) + eps) * weight, with
            q_a_layernorm.weight / kv_a_layernorm.weight, eps = rms_norm_eps;
  RoPE      apply_rotary_pos_emb of modeling_deepseek.py: inv_freq =
            1 / theta^(arange(0, rope, 2) / rope), emb = cat(freqs, freqs);
            q_pe and k_pe are first permuted view(..., rope/2, 2)
            .transpose(-1, -2).reshape(..., rope), then z*cos + rotate_half(z)
            *sin, i.e. the interleaved pairs (z[2i], z[2i+1]) are rotated by
            position * inv_freq[i] (the result left in the permuted order,
            the same for queries and keys, so scores are unchanged);
  attention query = cat(q_nope, q_pe'), key = cat(k_nope, k_pe' on every
            head), scores = query . key^T * (nope + rope)^-0.5, the causal
            mask, softmax over keys, times value, heads concatenated (T, H*v),
            o_proj back to hidden.

As an independent check the script computes the output a second way, the
absorbed ("weight-absorbed" / latent-cache) form: latent rows
[RMSNorm_kv(compressed) | k_pe rotated in place as interleaved pairs], per
head the absorbed query [q_nope . W_UK | q_pe rotated likewise] (W_UK, W_UV:
kv_b_proj's rows for k_nope and value), attention over the latent rows, the
weights times the normalised latents, then W_UV and o_proj; it asserts that
both forms agree within 1e-10 before writing anything.

Per case, into tests/data/mla/:
  <name>.safetensors  the layer's weights under HF's names and shapes (q_proj
                      or q_a_proj, q_a_layernorm, q_b_proj; kv_a_proj_with_mqa,
                      kv_a_layernorm, kv_b_proj, o_proj; nn.Linear (out, in)),
                      float32
  <name>.x.npy        the hidden states (T, hidden), float32
  <name>.y.npy        the layer's output (T, hidden), float32 of the float64
                      result
and cases.json: each case's config (hidden, num_heads, q_lora_rank,
kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rope_theta,
rms_norm_eps, tokens, seed) and max_abs_output. Running it again rewrites
identical bytes.
"""

import math
import os
import sys

sys.dont_write_bytecode = True

import torch  # noqa: E402

from make_golden import save_npy, write_index, write_safetensors  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mla")
MAX_TOTAL_BYTES = 200 * 1000
ABSORBED_TOLERANCE = 1e-10

CASES = [
    # DeepSeek-V2-Lite's shape, scaled down: no query compression (q_proj).
    dict(name="v2_lite_like", hidden=64, num_heads=4, q_lora_rank=0,
         kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
         v_head_dim=16, rope_theta=10000.0, rms_norm_eps=1e-6, tokens=13,
         seed=21),
    # DeepSeek-V3's (and V2's) shape, scaled down: compressed queries
    # (q_a_proj, q_a_layernorm, q_b_proj); v_head_dim != qk_nope_head_dim;
    # latent rows of 32 + 32, whole blocks of ggml's block types.
    dict(name="v3_like", hidden=48, num_heads=3, q_lora_rank=24,
         kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=32,
         v_head_dim=24, rope_theta=10000.0, rms_norm_eps=1e-6, tokens=11,
         seed=22),
]


def rms_norm(z, weight, eps):
    return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_cos_sin(t, d, theta):
    """modeling_deepseek.py's DeepseekV2RotaryEmbedding, in float64."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64)
                                / d))
    freqs = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(z):
    z1, z2 = z[..., :z.shape[-1] // 2], z[..., z.shape[-1] // 2:]
    return torch.cat((-z2, z1), dim=-1)


def apply_rotary_pos_emb(z, cos, sin):
    """modeling_deepseek.py's, on z (..., T, d) with cos, sin (T, d)."""
    d = z.shape[-1]
    z = z.reshape(*z.shape[:-1], d // 2, 2).transpose(-1, -2)
    z = z.reshape(*z.shape[:-2], d)
    return z * cos + rotate_half(z) * sin


def project(c, w, x):
    """The projections shared by both forms, float64: q_nope (H, T, nope),
    q_pe (H, T, rope) and k_pe (T, rope) unrotated, and the normalised
    latents (T, kv_lora_rank)."""
    t = x.shape[0]
    h, nope, rope = c["num_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"]
    eps = c["rms_norm_eps"]
    if c["q_lora_rank"] == 0:
        q = x @ w["q_proj.weight"].T
    else:
        q = rms_norm(x @ w["q_a_proj.weight"].T, w["q_a_layernorm.weight"],
                     eps) @ w["q_b_proj.weight"].T
    q = q.view(t, h, nope + rope).transpose(0, 1)
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    ckv = x @ w["kv_a_proj_with_mqa.weight"].T
    compressed, k_pe = ckv[:, :c["kv_lora_rank"]], ckv[:, c["kv_lora_rank"]:]
    latent = rms_norm(compressed, w["kv_a_layernorm.weight"], eps)
    return q_nope, q_pe, k_pe, latent


def causal_softmax(scores):
    t = scores.shape[-1]
    masked = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
    return torch.softmax(scores.masked_fill(masked, -math.inf), dim=-1)


def layer(c, w, x):
    """The plain (HF) form over one whole sequence x (T, hidden), float64."""
    t = x.shape[0]
    h, nope, rope = c["num_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"]
    v_dim = c["v_head_dim"]
    q_nope, q_pe, k_pe, latent = project(c, w, x)
    kv = (latent @ w["kv_b_proj.weight"].T).view(t, h, nope + v_dim)
    kv = kv.transpose(0, 1)
    k_nope, value = kv[..., :nope], kv[..., nope:]
    cos, sin = rope_cos_sin(t, rope, c["rope_theta"])
    q_pe = apply_rotary_pos_emb(q_pe, cos, sin)
    k_pe = apply_rotary_pos_emb(k_pe[None], cos, sin)          # (1, T, rope)
    query = torch.cat((q_nope, q_pe), dim=-1)
    key = torch.cat((k_nope, k_pe.expand(h, t, rope)), dim=-1)
    scores = query @ key.transpose(1, 2) * (nope + rope) ** -0.5
    context = causal_softmax(scores) @ value                  # (H, T, v)
    return context.transpose(0, 1).reshape(t, h * v_dim) @ w["o_proj.weight"].T


def rotate_interleaved(z, theta):
    """RoPE on adjacent pairs (z[2i], z[2i+1]) in place, as complex numbers
    (DeepSeek-V3's own inference code): z (..., T, d)."""
    t, d = z.shape[-2], z.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64)
                                / d))
    angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
    pairs = torch.view_as_complex(z.reshape(*z.shape[:-1], d // 2, 2)
                                  .contiguous())
    rotated = pairs * torch.polar(torch.ones_like(angle), angle)
    return torch.view_as_real(rotated).reshape(z.shape)


def layer_absorbed(c, w, x):
    """The absorbed form: attention over the latent rows, float64."""
    t = x.shape[0]
    h, nope, rope = c["num_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"]
    v_dim, rank = c["v_head_dim"], c["kv_lora_rank"]
    q_nope, q_pe, k_pe, latent = project(c, w, x)
    w_kv_b = w["kv_b_proj.weight"].view(h, nope + v_dim, rank)
    w_uk, w_uv = w_kv_b[:, :nope, :], w_kv_b[:, nope:, :]
    rows = torch.cat((latent, rotate_interleaved(k_pe, c["rope_theta"])),
                     dim=-1)                                  # (T, rank+rope)
    queries = torch.cat((q_nope @ w_uk,                       # (H, T, rank)
                         rotate_interleaved(q_pe, c["rope_theta"])), dim=-1)
    scores = queries @ rows.T * (nope + rope) ** -0.5
    context = causal_softmax(scores) @ latent                 # (H, T, rank)
    context = context @ w_uv.transpose(1, 2)                  # (H, T, v)
    return context.transpose(0, 1).reshape(t, h * v_dim) @ w["o_proj.weight"].T


def build(c):
    g = torch.Generator().manual_seed(c["seed"])
    hidden, h = c["hidden"], c["num_heads"]
    nope, rope, v_dim = (c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                         c["v_head_dim"])
    rank, q_rank = c["kv_lora_rank"], c["q_lora_rank"]

    def uniform(*shape, fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return ((torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1)
                * bound).to(torch.float32)

    def norm_weight(n):
        return (1 + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
                ).to(torch.float32)

    w = {}
    if q_rank == 0:
        w["q_proj.weight"] = uniform(h * (nope + rope), hidden, fan_in=hidden)
    else:
        w["q_a_proj.weight"] = uniform(q_rank, hidden, fan_in=hidden)
        w["q_a_layernorm.weight"] = norm_weight(q_rank)
        w["q_b_proj.weight"] = uniform(h * (nope + rope), q_rank,
                                       fan_in=q_rank)
    w["kv_a_proj_with_mqa.weight"] = uniform(rank + rope, hidden,
                                             fan_in=hidden)
    w["kv_a_layernorm.weight"] = norm_weight(rank)
    w["kv_b_proj.weight"] = uniform(h * (nope + v_dim), rank, fan_in=rank)
    w["o_proj.weight"] = uniform(hidden, h * v_dim, fan_in=h * v_dim)
    w64 = {k: v.to(torch.float64) for k, v in w.items()}

    x = torch.randn(c["tokens"], hidden, generator=g, dtype=torch.float64)
    x = x.to(torch.float32)
    y = layer(c, w64, x.to(torch.float64))
    y_absorbed = layer_absorbed(c, w64, x.to(torch.float64))
    diff = float((y - y_absorbed).abs().max())
    if not diff <= ABSORBED_TOLERANCE:
        sys.exit(f"make_mla_golden.py: {c['name']}: the absorbed form differs "
                 f"by {diff}")
    print(f"{c['name']}: plain vs absorbed max |diff| {diff:.3g}")
    return w, x, y


def main():
    torch.manual_seed(0)  # unused: every draw goes through a seeded generator
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    written, index = [], []
    for c in CASES:
        w, x, y = build(c)
        name = c["name"]
        write_safetensors(os.path.join(OUT_DIR, name + ".safetensors"), w,
                          {"source": "tests/data/make_mla_golden.py"})
        save_npy(os.path.join(OUT_DIR, name + ".x.npy"), x)
        save_npy(os.path.join(OUT_DIR, name + ".y.npy"), y)
        written += [name + ".safetensors", name + ".x.npy", name + ".y.npy"]
        index.append(dict(c, max_abs_output=float(y.abs().max())))
    write_index(OUT_DIR, {"cases": index}, written, MAX_TOTAL_BYTES,
                "make_mla_golden.py")


if __name__ == "__main__":
    main()
