"""simdattn.torch's drop-ins against the seed notebooks' classes.

The classes below are copied from the seed documents in shared/seeds/ (via
tests/data/make_golden.py, which copies them; only re-indented where the
source lost its indentation). Each chapter step is run as the seed runs it
(torch.manual_seed(123) etc. before the constructor) once with the seed's
class and once with the drop-in: same initial weights, same outputs within
1e-6.
"""
import pytest
import torch
import torch.nn as nn

import simdattn
import simdattn.torch as st


# Seed 001, "3.1. Using nn.Paramter for Q, K, V Weight matrix".
class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):

        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value

        d = keys.shape[1]

        attn_scores = queries @ keys.T
        scaled_attn_scores = attn_scores / (d ** 0.5)
        attn_weights = torch.softmax(scaled_attn_scores, dim=-1)

        context_vec = attn_weights @ values

        return context_vec


# Seed 004, "A self-attention class using PyTorch's Linear layers".
class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
        context_vec = attn_weights @ values
        return context_vec


# Seed 003 (re-indented), comments trimmed.
class CausalAttention(nn.Module):

    def __init__(self, d_in, d_out, context_length,
                 dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key   = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1)) # New

    def forward(self, x):
        b, num_tokens, d_in = x.shape

        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)

        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(  # New, _ ops are in-place
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1
        )
        attn_weights = self.dropout(attn_weights)

        context_vec = attn_weights @ values
        return context_vec


# The book's form (the seeds only describe it; make_golden.py says more).
class MultiHeadAttentionWrapper(nn.Module):

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)]
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


# Seed 003 (re-indented), comments trimmed.
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert (d_out % num_heads == 0), \
            "d_out must be divisible by num_heads"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads # Reduce the projection dim to match desired output dim

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # Linear layer to combine head outputs
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1)
        )

    def forward(self, x):
        b, num_tokens, d_in = x.shape

        keys = self.W_key(x) # Shape: (b, num_tokens, d_out)
        queries = self.W_query(x)
        values = self.W_value(x)

        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)

        keys = keys.transpose(1, 2)
        queries = queries.transpose(1, 2)
        values = values.transpose(1, 2)

        attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]

        attn_scores.masked_fill_(mask_bool, -torch.inf)

        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2)

        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec) # optional projection

        return context_vec


# The seeds' toy input ("Your journey starts with one step").
inputs = torch.tensor(
  [[0.43, 0.15, 0.89], # Your     (x^1)
   [0.55, 0.87, 0.66], # journey  (x^2)
   [0.57, 0.85, 0.64], # starts   (x^3)
   [0.22, 0.58, 0.33], # with     (x^4)
   [0.77, 0.25, 0.10], # one      (x^5)
   [0.05, 0.80, 0.55]] # step     (x^6)
)
batch = torch.stack((inputs, inputs), dim=0)

SEEDS = {
    "SelfAttention_v1": SelfAttention_v1,
    "SelfAttention_v2": SelfAttention_v2,
    "CausalAttention": CausalAttention,
    "MultiHeadAttentionWrapper": MultiHeadAttentionWrapper,
    "MultiHeadAttention": MultiHeadAttention,
}

# (class, torch.manual_seed, constructor arguments, input): the chapter's
# steps as the seeds run them.
STEPS = [
    ("SelfAttention_v1", 123, (3, 2), inputs),       # seed 001 In [24]
    ("SelfAttention_v2", 789, (3, 2), inputs),       # seeds 003/004
    ("SelfAttention_v2", 123, (3, 2, True), inputs),
    ("CausalAttention", 123, (3, 2, 6, 0.0), batch),  # seeds 003/004
    ("MultiHeadAttentionWrapper", 123, (3, 2, 6, 0.0, 2), batch),  # book 3.6.1
    ("MultiHeadAttention", 123, (3, 2, 6, 0.0, 2), batch),  # seed 003
    ("MultiHeadAttention", 123, (3, 4, 6, 0.0, 2, True), batch),
]


def both(name, seed, args):
    torch.manual_seed(seed)
    ref = SEEDS[name](*args)
    torch.manual_seed(seed)
    ours = getattr(st, name)(*args)
    return ref, ours


def assert_close(a, b, atol=1e-6, rtol=0.0):
    torch.testing.assert_close(a.detach(), b.detach(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("name,seed,args,x", STEPS,
                         ids=[f"{s[0]}-{s[1]}-{len(s[2])}" for s in STEPS])
def test_seed_steps(name, seed, args, x):
    ref, ours = both(name, seed, args)
    assert list(ref.state_dict()) == list(ours.state_dict())
    for (k, a), b in zip(ref.state_dict().items(),
                         ours.state_dict().values()):
        assert torch.equal(a, b), k  # The same initial weights.
    expected = ref(x)
    got = ours(x)  # Grad mode on, as in the seeds: parameters need none.
    assert got.shape == expected.shape
    assert_close(got, expected)
    ref.eval()
    ours.eval()
    assert_close(ours(x), ref(x))


def test_seed_printed_output():
    # Seed 001 In [24] prints this for torch.manual_seed(123).
    torch.manual_seed(123)
    sa_v1 = st.SelfAttention_v1(3, 2)
    printed = torch.tensor([[0.2996, 0.8053], [0.3061, 0.8210],
                            [0.3058, 0.8203], [0.2948, 0.7939],
                            [0.2927, 0.7891], [0.2990, 0.8040]])
    assert_close(sa_v1(inputs), printed, atol=6e-5)


@pytest.mark.parametrize("name,args,x_shape", [
    ("SelfAttention_v1", (5, 4), (7, 5)),
    ("SelfAttention_v2", (768, 36, True), (64, 768)),
    ("CausalAttention", (5, 4, 64, 0.0, True), (3, 7, 5)),
    ("MultiHeadAttentionWrapper", (5, 4, 7, 0.0, 3, True), (2, 7, 5)),
    ("MultiHeadAttention", (768, 768, 128, 0.0, 12), (2, 64, 768)),
])
def test_load_state_dict_both_ways(name, args, x_shape):
    torch.manual_seed(1)
    ref = SEEDS[name](*args)
    torch.manual_seed(2)  # Other weights, replaced by the load.
    ours = getattr(st, name)(*args)
    x = torch.randn(*x_shape, generator=torch.Generator().manual_seed(3))
    first = ours(x)  # Before the load: the native module's old weights.
    ours.load_state_dict(ref.state_dict())  # Unchanged seed code path.
    with torch.no_grad():
        expected = ref(x)
    got = ours(x)
    assert not torch.equal(first, got)
    big = x_shape[-1] >= 768
    assert_close(got, expected, atol=2e-5 if big else 1e-6,
                 rtol=1e-5 if big else 0)
    # And back: the drop-in's state_dict loads into the seed's class.
    back = SEEDS[name](*args)
    back.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert torch.equal(back(x), expected)


def test_parameter_changes_are_seen():
    torch.manual_seed(123)
    ref = MultiHeadAttention(3, 4, 6, 0.0, 2)
    torch.manual_seed(123)
    ours = st.MultiHeadAttention(3, 4, 6, 0.0, 2)
    assert_close(ours(batch), ref(batch))
    with torch.no_grad():
        ref.out_proj.bias += 1.0
        ours.out_proj.bias += 1.0  # In place: the version changes.
        ref.W_key.weight.mul_(0.5)
        ours.W_key.weight.mul_(0.5)
        assert_close(ours(batch), ref(batch))


def test_training_dropout_keeps_seed_semantics():
    # Training with dropout > 0 runs the seed's torch path, so torch's
    # generator gives the same dropout masks as the seed's.
    for name, args in [("CausalAttention", (3, 2, 6, 0.5)),
                       ("MultiHeadAttention", (3, 4, 6, 0.5, 2)),
                       ("MultiHeadAttentionWrapper", (3, 2, 6, 0.5, 2))]:
        ref, ours = both(name, 123, args)
        torch.manual_seed(7)
        with torch.no_grad():
            expected = ref(batch)
        torch.manual_seed(7)
        got = ours(batch)
        assert torch.equal(got, expected), name
        ref.eval()
        ours.eval()  # Eval: no dropout, simdattn.
        with torch.no_grad():
            assert_close(ours(batch), ref(batch))


def test_autograd_is_refused_clearly():
    torch.manual_seed(123)
    mha = st.MultiHeadAttention(3, 2, 6, 0.0, 2)
    x = batch.clone().requires_grad_()
    with pytest.raises(TypeError, match="x requires grad.*autograd"):
        mha(x)
    mha.requires_grad_(True)
    with pytest.raises(TypeError, match="a parameter requires grad.*autograd"):
        mha(batch)
    with torch.no_grad():
        mha(x)  # No graph needed: fine.


def test_nn_multihead_attention_equivalence():
    # Seed 003 points to torch.nn.MultiheadAttention; with equal weights and
    # a causal mask it computes the seed's MultiHeadAttention with qkv_bias.
    d, h, t = 12, 3, 6
    torch.manual_seed(123)
    ref = nn.MultiheadAttention(d, h, dropout=0.0, bias=True,
                                batch_first=True)
    ours = st.MultiHeadAttention(d, d, t, 0.0, h, qkv_bias=True)
    wq, wk, wv = ref.in_proj_weight.detach().chunk(3)
    bq, bk, bv = ref.in_proj_bias.detach().chunk(3)
    ours.load_state_dict({
        "W_query.weight": wq, "W_query.bias": bq,
        "W_key.weight": wk, "W_key.bias": bk,
        "W_value.weight": wv, "W_value.bias": bv,
        "out_proj.weight": ref.out_proj.weight.detach(),
        "out_proj.bias": ref.out_proj.bias.detach(),
        "mask": torch.triu(torch.ones(t, t), diagonal=1),
    })
    x = torch.randn(2, t, d, generator=torch.Generator().manual_seed(5))
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    with torch.no_grad():
        expected, _ = ref(x, x, x, attn_mask=causal, need_weights=False)
    assert_close(ours(x), expected)


def _llama_reference(layer, x, theta):
    """Hugging Face's Llama attention over one whole sequence x (T, hidden),
    float64: rotate_half RoPE at positions 0..T-1, GQA, causal, o_proj."""
    w = {n: p.double() for n, p in layer.state_dict().items()}
    x = x.double()
    t, h, kvh, d = (x.shape[0], layer.num_heads, layer.num_key_value_heads,
                    layer.head_dim)

    def proj(name):
        y = x @ w[name + ".weight"].t()
        return y + w[name + ".bias"] if name + ".bias" in w else y

    q = proj("q_proj").view(t, h, d).transpose(0, 1)
    k = proj("k_proj").view(t, kvh, d).transpose(0, 1)
    v = proj("v_proj").view(t, kvh, d).transpose(0, 1)
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)

    def rotate(z):
        return z * cos + torch.cat([-z[..., d // 2:], z[..., : d // 2]],
                                   -1) * sin

    q, k = rotate(q), rotate(k)
    k = k.repeat_interleave(h // kvh, 0)
    v = v.repeat_interleave(h // kvh, 0)
    s = q @ k.transpose(1, 2) / d ** 0.5
    s = s.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf"))
    out = (s.softmax(-1) @ v).transpose(0, 1).reshape(t, h * d)
    y = out @ w["o_proj.weight"].t()
    return y + w["o_proj.bias"] if "o_proj.bias" in w else y


@pytest.mark.parametrize("bias", [False, True])
def test_llama_attention_serves_steps_as_hugging_faces_layer(bias):
    torch.manual_seed(5)
    layer = simdattn.torch.LlamaAttention(64, 4, 2, rope_theta=500000.0,
                                          attention_bias=bias)
    assert sorted(layer.state_dict()) == sorted(
        f"{p}_proj.{t}" for p in "qkvo"
        for t in (("weight", "bias") if bias else ("weight",)))
    pages = simdattn.allocate_kv_pages("f32", 4, 16, 2, 16)
    x0, x1 = torch.randn(7, 64), torch.randn(4, 64)
    steps = [  # Two prefills, then a decode each.
        (torch.cat([x0[:6], x1[:3]]), [0, 6, 9], [6, 3],
         list(range(6)) + [16, 17, 18]),
        (torch.cat([x0[6:], x1[3:]]), [0, 1, 2], [7, 4], [6, 19]),
    ]
    outs = []
    for x, starts, lens, slots in steps:
        plan = simdattn.VarlenPlan(pages, starts, lens, [[0, -1], [1, -1]],
                                   slot_mapping=slots)
        outs.append(layer.forward_step(x, plan, pages))
    want0 = _llama_reference(layer, x0, 500000.0)
    want1 = _llama_reference(layer, x1, 500000.0)
    got0 = torch.cat([outs[0][:6], outs[1][:1]]).double()
    got1 = torch.cat([outs[0][6:], outs[1][1:]]).double()
    assert (got0 - want0).abs().max() < 1e-4
    assert (got1 - want1).abs().max() < 1e-4
    with pytest.raises(TypeError, match="forward_step"):
        layer(x0)
