#!/usr/bin/python3
"""Writes the PyTorch golden cases in tests/data/golden/ for simdattn's tests.

Run with Debian's interpreter, which has python3-torch (1.13) and numpy:

    /usr/bin/python3 tests/data/make_golden.py

The module classes below are copied from the seed documents in shared/seeds/
(only re-indented where the source lost its indentation), because the C++
modules must match them state_dict for state_dict and number for number.

For every case the script writes
  <name>.safetensors       the module's state_dict, exactly as PyTorch has it
                           (buffers such as `mask` included), F32
  <name>.input.npy         float32 input
  <name>.output.npy        float32 module output (eval mode, dropout 0)
  <name>.attn_weights.npy  float32 attention weights, always (b, h, T, T);
                           b = h = 1 for the unbatched modules
and one index, cases.json. Running it again rewrites identical bytes (fixed
seeds, one thread, sorted keys, no time stamps), and files it no longer
produces are removed.
"""

import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
# The tree carries these files; keep the whole set well under 8 MB.
MAX_TOTAL_BYTES = 8 * 1000 * 1000


# ---------------------------------------------------------------------------
# The seeds' module classes.
# ---------------------------------------------------------------------------


class SimplifiedSelfAttention(nn.Module):
    """Seed 001, section 1.3 (and seed 000): no trainable weights.

    The seeds write it as loose statements; wrapped in a module only so that
    every case has the same shape (an empty state_dict here).
    """

    def forward(self, inputs):
        attn_scores = inputs @ inputs.T
        attn_weights = torch.softmax(attn_scores, dim=-1)
        all_context_vecs = attn_weights @ inputs
        return all_context_vecs


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


# Seed 004, "A self-attention class using PyTorch's Linear layers" (same as
# seed 003's, which lacks only `self.d_out`).
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


# Seed 003 (re-indented; its indentation was lost), comments trimmed.
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


# Not written out in the seeds (seed 003 only says "a wrapper that runs it
# several times"); this is the form of "Build a Large Language Model (From
# Scratch)", ch. 3, which the seeds follow, as its many public copies give it.
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


# ---------------------------------------------------------------------------
# Attention weights, by the same steps as each forward() above. Each returns
# (weights (b, h, T, T), output rebuilt from those weights); main() checks the
# rebuilt output against forward() so that the two cannot drift apart.
# ---------------------------------------------------------------------------


def weights_simplified(m, x):
    attn_weights = torch.softmax(x @ x.T, dim=-1)
    return attn_weights[None, None], attn_weights @ x


def weights_v1(m, x):
    keys = x @ m.W_key
    queries = x @ m.W_query
    values = x @ m.W_value
    d = keys.shape[1]
    attn_weights = torch.softmax((queries @ keys.T) / (d ** 0.5), dim=-1)
    return attn_weights[None, None], attn_weights @ values


def weights_v2(m, x):
    keys = m.W_key(x)
    queries = m.W_query(x)
    values = m.W_value(x)
    attn_weights = torch.softmax((queries @ keys.T) / keys.shape[-1]**0.5,
                                 dim=-1)
    return attn_weights[None, None], attn_weights @ values


def weights_causal(m, x):
    b, num_tokens, d_in = x.shape
    keys = m.W_key(x)
    queries = m.W_query(x)
    values = m.W_value(x)
    attn_scores = queries @ keys.transpose(1, 2)
    attn_scores.masked_fill_(m.mask.bool()[:num_tokens, :num_tokens],
                             -torch.inf)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
    return attn_weights[:, None], attn_weights @ values


def weights_wrapper(m, x):
    per_head = [weights_causal(head, x) for head in m.heads]
    return (torch.cat([w for w, _ in per_head], dim=1),
            torch.cat([o for _, o in per_head], dim=-1))


def weights_mha(m, x):
    b, num_tokens, d_in = x.shape
    keys = m.W_key(x).view(b, num_tokens, m.num_heads, m.head_dim)
    values = m.W_value(x).view(b, num_tokens, m.num_heads, m.head_dim)
    queries = m.W_query(x).view(b, num_tokens, m.num_heads, m.head_dim)
    keys = keys.transpose(1, 2)
    queries = queries.transpose(1, 2)
    values = values.transpose(1, 2)
    attn_scores = queries @ keys.transpose(2, 3)
    attn_scores.masked_fill_(m.mask.bool()[:num_tokens, :num_tokens],
                             -torch.inf)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
    context_vec = (attn_weights @ values).transpose(1, 2)
    context_vec = context_vec.contiguous().view(b, num_tokens, m.d_out)
    return attn_weights, m.out_proj(context_vec)


# name -> (class, constructor argument names in order, weights function,
# whether the input is batched (b, T, d_in) or a single (T, d_in) sequence)
MODULES = {
    "SimplifiedSelfAttention": (SimplifiedSelfAttention, [],
                                weights_simplified, False),
    "SelfAttention_v1": (SelfAttention_v1, ["d_in", "d_out"], weights_v1,
                         False),
    "SelfAttention_v2": (SelfAttention_v2, ["d_in", "d_out", "qkv_bias"],
                         weights_v2, False),
    "CausalAttention": (CausalAttention,
                        ["d_in", "d_out", "context_length", "dropout",
                         "qkv_bias"], weights_causal, True),
    "MultiHeadAttentionWrapper": (MultiHeadAttentionWrapper,
                                  ["d_in", "d_out", "context_length",
                                   "dropout", "num_heads", "qkv_bias"],
                                  weights_wrapper, True),
    "MultiHeadAttention": (MultiHeadAttention,
                           ["d_in", "d_out", "context_length", "dropout",
                            "num_heads", "qkv_bias"], weights_mha, True),
}


# ---------------------------------------------------------------------------
# The seeds' inputs and the numbers they print.
# ---------------------------------------------------------------------------

# "Your journey starts with one step" (seeds 001, 003, 004).
TOY_INPUTS = [[0.43, 0.15, 0.89],  # Your     (x^1)
              [0.55, 0.87, 0.66],  # journey  (x^2)
              [0.57, 0.85, 0.64],  # starts   (x^3)
              [0.22, 0.58, 0.33],  # with     (x^4)
              [0.77, 0.25, 0.10],  # one      (x^5)
              [0.05, 0.80, 0.55]]  # step     (x^6)

# "These are random words and embeddings" (seed 000).
SEED000_INPUTS = [[0.35, 0.15, 0.89],
                  [0.97, 0.8, 0.3],
                  [0.65, 0.34, 0.24],
                  [0.2, 0.87, 0.34],
                  [0.86, 0.13, 0.05],
                  [0.10, 0.20, 0.30]]

# Printed by seed 001, In [9] and In [11].
SEED001_SIMPLE_WEIGHTS = [[0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452],
                          [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581],
                          [0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565],
                          [0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720],
                          [0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295],
                          [0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896]]
SEED001_SIMPLE_CONTEXT = [[0.4421, 0.5931, 0.5790],
                          [0.4419, 0.6515, 0.5683],
                          [0.4431, 0.6496, 0.5671],
                          [0.4304, 0.6298, 0.5510],
                          [0.4671, 0.5910, 0.5266],
                          [0.4177, 0.6503, 0.5645]]
# Printed by seed 000, In [9]; the last context rows are cut off there.
SEED000_SIMPLE_WEIGHTS = [[0.2376, 0.1925, 0.1522, 0.1539, 0.1341, 0.1297],
                          [0.1235, 0.3176, 0.1583, 0.1611, 0.1550, 0.0845],
                          [0.1509, 0.2445, 0.1674, 0.1532, 0.1707, 0.1133],
                          [0.1477, 0.2408, 0.1483, 0.2224, 0.1208, 0.1201],
                          [0.1371, 0.2468, 0.1760, 0.1287, 0.2033, 0.1080],
                          [0.1818, 0.1846, 0.1601, 0.1754, 0.1481, 0.1500]]
SEED000_SIMPLE_CONTEXT_HEAD = [[0.5279, 0.4187, 0.4037],
                               [0.6281, 0.5036, 0.3311],
                               [0.5876, 0.4533, 0.3425]]
# Seed 001, In [24]: torch.manual_seed(123); SelfAttention_v1(3, 2)(inputs).
SEED001_V1_OUTPUT = [[0.2996, 0.8053],
                     [0.3061, 0.8210],
                     [0.3058, 0.8203],
                     [0.2948, 0.7939],
                     [0.2927, 0.7891],
                     [0.2990, 0.8040]]
# Seed 001, In [14], [19], [21]: the same seed-123 torch.rand weights, by hand
# for x^2: query, attention weights, context vector.
SEED001_V1_QUERY_2 = [0.4306, 1.4551]
SEED001_V1_WEIGHTS_2 = [0.1500, 0.2264, 0.2199, 0.1311, 0.0906, 0.1820]
# Seed 000, In [10]-[15]: torch.manual_seed(123) then torch.randn weights, by
# hand for x^3: query, attention weights, context vector.
SEED000_QUERY_3 = [-0.4854, 0.0467]
SEED000_WEIGHTS_3 = [0.1547, 0.1828, 0.1755, 0.1425, 0.1949, 0.1497]
SEED000_CONTEXT_3 = [0.2618, 0.4683]

# Not printed in the seeds (they print only shapes here), but printed by the
# book they follow, for the same seeds and inputs; checked as a second line of
# evidence that the class code above is the seeds' code.
BOOK_V2_OUTPUT = [[-0.0739, 0.0713],
                  [-0.0748, 0.0703],
                  [-0.0749, 0.0702],
                  [-0.0760, 0.0685],
                  [-0.0763, 0.0679],
                  [-0.0754, 0.0693]]
BOOK_CAUSAL_OUTPUT = [[-0.4519, 0.2216],
                      [-0.5874, 0.0058],
                      [-0.6300, -0.0632],
                      [-0.5675, -0.0843],
                      [-0.5526, -0.0981],
                      [-0.5299, -0.1081]]
BOOK_WRAPPER_OUTPUT = [[-0.4519, 0.2216, 0.4772, 0.1063],
                       [-0.5874, 0.0058, 0.5891, 0.3257],
                       [-0.6300, -0.0632, 0.6202, 0.3860],
                       [-0.5675, -0.0843, 0.5478, 0.3589],
                       [-0.5526, -0.0981, 0.5321, 0.3428],
                       [-0.5299, -0.1081, 0.5077, 0.3493]]
BOOK_MHA_OUTPUT = [[0.3190, 0.4858],
                   [0.2943, 0.3897],
                   [0.2856, 0.3593],
                   [0.2693, 0.3873],
                   [0.2639, 0.3928],
                   [0.2575, 0.4028]]


def check_printed(what, actual, printed):
    """Asserts that `actual` prints as `printed` at torch's 4 decimals."""
    if isinstance(actual, torch.Tensor):
        actual = actual.detach().numpy()
    actual = np.asarray(actual, dtype=np.float64)
    printed = np.asarray(printed, dtype=np.float64)
    assert actual.shape == printed.shape, (what, actual.shape, printed.shape)
    # Printing rounds to 4 decimals, so a match is within half a unit of the
    # last printed digit (plus float32 noise at the rounding boundary).
    worst = float(np.max(np.abs(actual - printed)))
    ok = worst <= 0.5e-4 + 1e-6
    print(f"  {'ok ' if ok else 'BAD'} {what}: max |diff| {worst:.2e}")
    print("      printed:  " + np.array2string(printed.ravel()[:6],
                                              precision=4))
    print("      computed: " + np.array2string(actual.ravel()[:6],
                                              precision=4))
    if not ok:
        sys.exit(f"make_golden.py: {what} does not reproduce the printed "
                 f"numbers (max |diff| {worst:.2e})")


# ---------------------------------------------------------------------------
# Writers.
# ---------------------------------------------------------------------------


def write_safetensors(path, state_dict, metadata):
    """Writes a safetensors file by hand (the package is not a dependency).

    Layout: u64 little-endian header length N, N bytes of JSON header (padded
    with spaces to a multiple of 8 so that the data starts aligned, as the
    reference writer does), then the tensors' raw little-endian bytes back to
    back, in the header's (sorted) order, with no holes.
    """
    header = {"__metadata__": dict(metadata)}
    blobs = []
    offset = 0
    for name in sorted(state_dict):
        t = state_dict[name]
        assert t.dtype == torch.float32, (name, t.dtype)
        data = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":"))
    text = text.encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def save_npy(path, t):
    # Little-endian float32 in C order is all the C++ reader accepts.
    np.save(path, np.ascontiguousarray(t.detach().numpy().astype("<f4")),
            allow_pickle=False)


def write_index(out_dir, doc, written, max_bytes, script):
    """Writes doc as out_dir/cases.json, removes the files of cases that no
    longer exist (idempotence), and exits if the set exceeds max_bytes.
    `written` holds the names of the files this run wrote."""
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    written = set(written) | {"cases.json"}

    for stale in sorted(set(os.listdir(out_dir)) - written):
        if stale.endswith((".npy", ".safetensors", ".json")):
            os.remove(os.path.join(out_dir, stale))
            print(f"removed stale {stale}")

    total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in written)
    print(f"{len(doc['cases'])} cases, {len(written)} files, {total} bytes "
          f"in {out_dir}")
    if total > max_bytes:
        sys.exit(f"{script}: {total} bytes exceeds {max_bytes}")


# ---------------------------------------------------------------------------
# The cases.
# ---------------------------------------------------------------------------


def case(name, module, *, seed, source, input_seed=None, inputs=None,
         batch=None, T=None, d_in=None, d_out=None, context_length=None,
         num_heads=None, qkv_bias=None, weights_from=None):
    """One golden case; `inputs` is given for the seeds' toy inputs, else the
    input is drawn from torch.randn with its own generator seeded with
    `input_seed`, so that the module's init sees exactly the global RNG state
    that torch.manual_seed(seed) gives (as in the seeds)."""
    return dict(name=name, module=module, seed=seed, source=source,
                input_seed=input_seed, inputs=inputs, batch=batch, T=T,
                d_in=d_in, d_out=d_out, context_length=context_length,
                num_heads=num_heads, qkv_bias=qkv_bias,
                weights_from=weights_from)


TOY_BATCH = "stack((toy, toy))"


def toy_cases():
    return [
        case("simplified_toy", "SimplifiedSelfAttention", seed=None,
             inputs="toy", source="seed 001 section 1.3: softmax(X X^T) X"),
        case("simplified_seed000", "SimplifiedSelfAttention", seed=None,
             inputs="seed000", source="seed 000 In [9]"),
        case("self_attention_v1_toy", "SelfAttention_v1", seed=123,
             inputs="toy", d_in=3, d_out=2,
             source="seed 001 In [24]: torch.manual_seed(123)"),
        # Seed 000 builds W_q, W_k, W_v with torch.randn instead of rand; the
        # same maths as SelfAttention_v1, so stored as one with those weights.
        case("self_attention_v1_seed000_randn", "SelfAttention_v1", seed=123,
             inputs="seed000", d_in=3, d_out=2, weights_from="randn",
             source="seed 000 In [10]-[15]: torch.manual_seed(123), "
                    "W = torch.randn(d_in, d_out) x3 (query, key, value)"),
        case("self_attention_v2_toy", "SelfAttention_v2", seed=789,
             inputs="toy", d_in=3, d_out=2, qkv_bias=False,
             source="seeds 003/004: torch.manual_seed(789)"),
        case("causal_attention_toy", "CausalAttention", seed=123,
             inputs="toy_batch", d_in=3, d_out=2, context_length=6,
             qkv_bias=False,
             source="seed 003/004: torch.manual_seed(123), batch of 2 toys"),
        case("mha_wrapper_toy", "MultiHeadAttentionWrapper", seed=123,
             inputs="toy_batch", d_in=3, d_out=2, context_length=6,
             num_heads=2, qkv_bias=False,
             source="book ch. 3.6.1: torch.manual_seed(123), num_heads=2"),
        case("multi_head_attention_toy", "MultiHeadAttention", seed=123,
             inputs="toy_batch", d_in=3, d_out=2, context_length=6,
             num_heads=2, qkv_bias=False,
             source="seed 003: torch.manual_seed(123), num_heads=2"),
    ]


def random_cases():
    # A covering subset of T in {1, 2, 7, 64, 257}, d_in in {3, 5, 768},
    # heads in {1, 2, 3, 12} and qkv_bias on/off, per module, rather than the
    # product: every value of every axis appears for the modules that take
    # it, T=257 and d_in=768 meet at least once, and context_length > T
    # exercises the mask's [:T, :T] slice. Sizes are kept so that the whole
    # directory stays under MAX_TOTAL_BYTES (T*T weights and the
    # context_length^2 masks dominate).
    specs = [
        # name, module, batch, T, d_in, d_out, ctx, heads, bias
        ("simplified_t1_d3", "SimplifiedSelfAttention", None, 1, 3, None,
         None, None, None),
        ("simplified_t7_d5", "SimplifiedSelfAttention", None, 7, 5, None,
         None, None, None),
        ("simplified_t64_d768", "SimplifiedSelfAttention", None, 64, 768,
         None, None, None, None),
        ("v1_t1_d3", "SelfAttention_v1", None, 1, 3, 2, None, None, None),
        ("v1_t7_d5", "SelfAttention_v1", None, 7, 5, 4, None, None, None),
        ("v1_t64_d768", "SelfAttention_v1", None, 64, 768, 24, None, None,
         None),
        ("v2_t2_d5_bias", "SelfAttention_v2", None, 2, 5, 3, None, None,
         True),
        ("v2_t257_d3", "SelfAttention_v2", None, 257, 3, 4, None, None,
         False),
        ("v2_t64_d768_bias", "SelfAttention_v2", None, 64, 768, 36, None,
         None, True),
        ("causal_b2_t7_d5_bias", "CausalAttention", 2, 7, 5, 4, 7, None,
         True),
        ("causal_b1_t257_d3", "CausalAttention", 1, 257, 3, 2, 257, None,
         False),
        ("causal_b2_t1_d768_bias_ctx8", "CausalAttention", 2, 1, 768, 24, 8,
         None, True),
        ("causal_b3_t7_d5_ctx64", "CausalAttention", 3, 7, 5, 6, 64, None,
         False),
        ("wrapper_b1_t1_d3_h1", "MultiHeadAttentionWrapper", 1, 1, 3, 2, 1,
         1, False),
        ("wrapper_b2_t7_d5_h3_bias", "MultiHeadAttentionWrapper", 2, 7, 5, 4,
         7, 3, True),
        ("wrapper_b2_t2_d3_h12_bias", "MultiHeadAttentionWrapper", 2, 2, 3,
         2, 2, 12, True),
        ("wrapper_b1_t64_d768_h2", "MultiHeadAttentionWrapper", 1, 64, 768,
         12, 64, 2, False),
        ("mha_b1_t1_d3_h1", "MultiHeadAttention", 1, 1, 3, 2, 1, 1, False),
        ("mha_b2_t2_d5_h12_bias", "MultiHeadAttention", 2, 2, 5, 12, 2, 12,
         True),
        ("mha_b2_t7_d5_h3_bias", "MultiHeadAttention", 2, 7, 5, 6, 7, 3,
         True),
        ("mha_b1_t7_d3_h3_ctx64", "MultiHeadAttention", 1, 7, 3, 3, 64, 3,
         False),
        ("mha_b2_t64_d768_h12_bias", "MultiHeadAttention", 2, 64, 768, 36,
         64, 12, True),
        ("mha_b1_t257_d768_h2", "MultiHeadAttention", 1, 257, 768, 24, 257,
         2, False),
    ]
    cases = []
    for i, (name, module, batch, T, d_in, d_out, ctx, heads,
            bias) in enumerate(specs):
        seed = 1000 + i
        cases.append(case(name, module, seed=seed, input_seed=seed,
                          batch=batch, T=T, d_in=d_in, d_out=d_out,
                          context_length=ctx, num_heads=heads,
                          qkv_bias=bias, source="random"))
    return cases


def build(c):
    """Returns (module, input) for one case, in eval mode."""
    cls, arg_names, _, batched = MODULES[c["module"]]
    args = {"d_in": c["d_in"], "d_out": c["d_out"],
            "context_length": c["context_length"], "dropout": 0.0,
            "num_heads": c["num_heads"], "qkv_bias": c["qkv_bias"]}
    if c["seed"] is not None:
        torch.manual_seed(c["seed"])
    module = cls(*[args[a] for a in arg_names])
    if c["weights_from"] == "randn":
        # Seed 000's own draw order: W_q, W_k, W_v from a fresh seed.
        torch.manual_seed(c["seed"])
        with torch.no_grad():
            for p in (module.W_query, module.W_key, module.W_value):
                p.copy_(torch.randn(c["d_in"], c["d_out"]))
    module.eval()

    if c["inputs"] is not None:
        toy = torch.tensor(SEED000_INPUTS if c["inputs"] == "seed000"
                           else TOY_INPUTS)
        x = torch.stack((toy, toy), dim=0) if c["inputs"] == "toy_batch" \
            else toy
    else:
        shape = ((c["batch"],) if batched else ()) + (c["T"], c["d_in"])
        gen = torch.Generator().manual_seed(c["input_seed"])
        x = torch.randn(shape, generator=gen)
    return module, x


def check_seed_numbers(name, module, x, out, weights):
    """The seeds' (and the book's) printed numbers, where there are any."""
    w = weights[0, 0]
    if name == "simplified_toy":
        check_printed("seed 001 simplified attention weights", w,
                      SEED001_SIMPLE_WEIGHTS)
        check_printed("seed 001 simplified context vectors", out,
                      SEED001_SIMPLE_CONTEXT)
    elif name == "simplified_seed000":
        check_printed("seed 000 simplified attention weights", w,
                      SEED000_SIMPLE_WEIGHTS)
        check_printed("seed 000 simplified context vectors (rows 0-2)",
                      out[:3], SEED000_SIMPLE_CONTEXT_HEAD)
    elif name == "self_attention_v1_toy":
        check_printed("seed 001 SelfAttention_v1 output", out,
                      SEED001_V1_OUTPUT)
        check_printed("seed 001 query_2", x[1] @ module.W_query,
                      SEED001_V1_QUERY_2)
        check_printed("seed 001 attn_weights_2", w[1], SEED001_V1_WEIGHTS_2)
        check_printed("seed 001 context_vec_2", out[1],
                      SEED001_V1_OUTPUT[1])
    elif name == "self_attention_v1_seed000_randn":
        check_printed("seed 000 query_3_first", x[2] @ module.W_query,
                      SEED000_QUERY_3)
        check_printed("seed 000 attn_weights_3", w[2], SEED000_WEIGHTS_3)
        check_printed("seed 000 context_vec_3", out[2], SEED000_CONTEXT_3)
    elif name == "self_attention_v2_toy":
        check_printed("book SelfAttention_v2 output (seed 789)", out,
                      BOOK_V2_OUTPUT)
    elif name == "causal_attention_toy":
        for i in range(2):
            check_printed(f"book CausalAttention output [{i}]", out[i],
                          BOOK_CAUSAL_OUTPUT)
    elif name == "mha_wrapper_toy":
        for i in range(2):
            check_printed(f"book MultiHeadAttentionWrapper output [{i}]",
                          out[i], BOOK_WRAPPER_OUTPUT)
    elif name == "multi_head_attention_toy":
        for i in range(2):
            check_printed(f"book MultiHeadAttention output [{i}]", out[i],
                          BOOK_MHA_OUTPUT)


def main():
    # One thread: the reduction order, hence every bit of the output, must
    # not depend on the machine's core count.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)

    index = []
    written = set()
    for c in toy_cases() + random_cases():
        name = c["name"]
        module, x = build(c)
        with torch.no_grad():
            out = module(x)
            weights, rebuilt = MODULES[c["module"]][2](module, x)
        # The weights come from a second copy of the forward's steps; if that
        # copy rebuilt a different output it computed different weights.
        if not torch.allclose(rebuilt, out, rtol=1e-6, atol=1e-6):
            sys.exit(f"make_golden.py: {name}: weights do not rebuild the "
                     f"output (max |diff| "
                     f"{(rebuilt - out).abs().max().item():.3e})")
        if c["source"] != "random":
            print(f"{name} ({c['module']}, {c['source']}):")
            check_seed_numbers(name, module, x, out, weights)

        files = {"state_dict": f"{name}.safetensors",
                 "input": f"{name}.input.npy",
                 "output": f"{name}.output.npy",
                 "attn_weights": f"{name}.attn_weights.npy"}
        state = module.state_dict()
        write_safetensors(os.path.join(OUT_DIR, files["state_dict"]), state,
                          {"format": "pt", "module": c["module"],
                           "case": name})
        save_npy(os.path.join(OUT_DIR, files["input"]), x)
        save_npy(os.path.join(OUT_DIR, files["output"]), out)
        save_npy(os.path.join(OUT_DIR, files["attn_weights"]), weights)
        written.update(files.values())

        index.append({
            "name": name,
            "module": c["module"],
            # Every constructor argument of the ladder; null where this module
            # does not take it. ctor_args lists the ones it takes, in order.
            "args": {"d_in": c["d_in"], "d_out": c["d_out"],
                     "context_length": c["context_length"], "dropout": 0.0,
                     "num_heads": c["num_heads"], "qkv_bias": c["qkv_bias"]},
            "ctor_args": MODULES[c["module"]][1],
            "seed": c["seed"],
            "input_seed": c["input_seed"],
            "source": c["source"],
            "files": files,
            "input_shape": list(x.shape),
            "output_shape": list(out.shape),
            "attn_weights_shape": list(weights.shape),
            "state_dict": {k: list(v.shape) for k, v in state.items()},
        })

    doc = {
        "about": "Golden cases for simdattn, written by make_golden.py "
                 "(PyTorch, eval mode, dropout 0). Inputs of random cases: "
                 "torch.randn(input_shape, generator=torch.Generator()"
                 ".manual_seed(input_seed)); modules: torch.manual_seed(seed) "
                 "then the constructor. attn_weights are (b, h, T, T), "
                 "b = h = 1 for unbatched modules. All arrays are "
                 "little-endian float32.",
        "torch_version": torch.__version__.split("+")[0],
        "cases": index,
    }
    write_index(OUT_DIR, doc, written, MAX_TOTAL_BYTES, "make_golden.py")


if __name__ == "__main__":
    main()
