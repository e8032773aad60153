"""A serving loop from Python over a torch pool (vLLM's conventions): joins,
decodes, chunked prefill, speculative verification with rejection, and a
leaver whose blocks are reused. Each step is planned once (VarlenPlan) and
run for two layers; every output equals the unplanned call bit for bit and a
float64 reference within the bound of the pool's type."""
import numpy as np
import pytest
import torch

import simdattn
from reference import attention as reference

BLOCK = 16
HEADS, KV_HEADS, DIM = 4, 2, 32


class Engine:
    """The bookkeeping an engine keeps: free blocks, each sequence's blocks
    and the float32 keys and values it wrote (what attention should see)."""

    def __init__(self, dtype, num_blocks=24, layers=2):
        self.pools = [simdattn.allocate_kv_pages(dtype, num_blocks, BLOCK,
                                                 KV_HEADS, DIM)
                      for _ in range(layers)]
        self.free = list(range(num_blocks))[::-1]
        self.blocks = {}   # sequence -> its blocks
        self.kv = {}       # (layer, sequence) -> (keys, values) (T, kvh, D)
        self.max_blocks = 8

    def slot(self, seq, pos):
        blocks = self.blocks[seq]
        while len(blocks) <= pos // BLOCK:
            blocks.append(self.free.pop())
        return blocks[pos // BLOCK] * BLOCK + pos % BLOCK

    def leave(self, seq):
        self.free.extend(self.blocks.pop(seq))
        for layer in range(len(self.pools)):
            self.kv.pop((layer, seq), None)

    def truncate(self, seq, length):
        """Rejected drafts: the sequence keeps `length` tokens."""
        for layer in range(len(self.pools)):
            k, v = self.kv[(layer, seq)]
            self.kv[(layer, seq)] = (k[:length], v[:length])

    def step(self, new_tokens, rng):
        """new_tokens: {sequence: count}. Writes and attends every layer by
        a plan and by the unplanned calls; returns the outputs."""
        seqs = list(new_tokens)
        for s in seqs:
            self.blocks.setdefault(s, [])
        starts, lens, slots, table = [0], [], [], []
        for s in seqs:
            old = self.kv[(0, s)][0].shape[0] if (0, s) in self.kv else 0
            n = new_tokens[s]
            slots += [self.slot(s, p) for p in range(old, old + n)]
            starts.append(starts[-1] + n)
            lens.append(old + n)
            row = self.blocks[s] + [-1] * (self.max_blocks - len(self.blocks[s]))
            table.append(row)
        t = starts[-1]
        meta = dict(query_start_loc=torch.tensor(starts, dtype=torch.int32),
                    seq_lens=torch.tensor(lens, dtype=torch.int32),
                    block_table=torch.tensor(table, dtype=torch.int32))
        plan = simdattn.VarlenPlan(
            self.pools[0], slot_mapping=torch.tensor(slots), **meta)
        assert plan.num_tokens == t and plan.num_seqs == len(seqs)
        outs = []
        for layer, pool in enumerate(self.pools):
            q = torch.from_numpy(rng.standard_normal((t, HEADS, DIM),
                                                     dtype=np.float32))
            k = torch.from_numpy(rng.standard_normal((t, KV_HEADS, DIM),
                                                     dtype=np.float32))
            v = torch.from_numpy(rng.standard_normal((t, KV_HEADS, DIM),
                                                     dtype=np.float32))
            plan.write(k, v, pool)
            out, lse = plan.attention(q, pool, return_lse=True)
            again, again_lse = simdattn.varlen_attention(
                q, pool, return_lse=True, **meta)
            assert torch.equal(out.view(torch.int32),
                               again.view(torch.int32))
            assert torch.equal(lse.view(torch.int32),
                               again_lse.view(torch.int32))
            for i, s in enumerate(seqs):
                rows = slice(starts[i], starts[i + 1])
                old_k, old_v = self.kv.get(
                    (layer, s), (torch.zeros(0, KV_HEADS, DIM),) * 2)
                keys = torch.cat([old_k, k[rows]])
                values = torch.cat([old_v, v[rows]])
                self.kv[(layer, s)] = (keys, values)
                self.check(pool, q[rows], keys, values, out[rows],
                           lse[:, rows])
            outs.append(out)
        return outs

    def check(self, pool, q, keys, values, out, lse):
        if pool.dtype == "bf16":  # The pool holds the rounded values.
            keys = keys.to(torch.bfloat16).to(torch.float32)
            values = values.to(torch.bfloat16).to(torch.float32)
        n = q.shape[0]
        want, want_lse = reference(q.permute(1, 0, 2)[None],
                                   keys.permute(1, 0, 2)[None],
                                   values.permute(1, 0, 2)[None],
                                   causal=True,
                                   causal_offset=keys.shape[0] - n)
        got = out.permute(1, 0, 2)[None].to(torch.float64)
        assert (got - want).abs().max().item() < 2e-5
        assert (lse[None].to(torch.float64) - want_lse).abs().max() < 2e-5


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_serving_loop_plans_each_step_once(dtype):
    rng = np.random.default_rng(1)
    e = Engine(dtype)
    e.step({0: 40, 1: 7}, rng)             # two join
    e.step({0: 1, 1: 1, 2: 20}, rng)       # decodes; a third joins
    e.step({2: 17, 0: 1, 1: 1}, rng)       # chunked prefill with decodes
    e.step({0: 5, 1: 1, 2: 1}, rng)        # sequence 0 verifies 4 drafts
    e.truncate(0, 42 + 2)                  # ... and keeps 2 of them
    e.leave(1)                             # a leaver: its blocks are free
    e.step({0: 1, 2: 1, 3: 33}, rng)       # a joiner takes them
    assert set(e.blocks) == {0, 2, 3}


def test_write_kv_slots_equals_the_plans_write():
    pools = [simdattn.allocate_kv_pages("q8_0", 4, BLOCK, KV_HEADS, DIM)
             for _ in range(2)]
    k = torch.randn(5, KV_HEADS, DIM)
    v = torch.randn(5, KV_HEADS, DIM)
    slots = torch.tensor([3, 4, -1, 17, 40])
    simdattn.write_kv_slots(k, v, pools[0], slots, positions=[3, 4, 5, 1, 8],
                            rope_theta=10000.0)
    plan = simdattn.VarlenPlan(
        pools[1], [0, 2, 5], [5, 9], [[0, -1, -1], [1, 2, -1]],
        slot_mapping=slots, positions=[3, 4, 5, 1, 8])
    plan.write(k, v, pools[1], rope_theta=10000.0)
    assert torch.equal(pools[0].key_cache, pools[1].key_cache)
    assert torch.equal(pools[0].value_cache, pools[1].value_cache)
    assert pools[0].key_cache.dtype == torch.uint8
    assert pools[0].key_cache.shape == (4, KV_HEADS, BLOCK, DIM // 32 * 34)


def test_errors_name_the_argument_and_change_nothing():
    pool = simdattn.allocate_kv_pages("int8", 4, BLOCK, KV_HEADS, DIM)
    before = pool.key_cache.clone()
    meta = dict(query_start_loc=[0, 1], seq_lens=[3], block_table=[[2, -1]])
    with pytest.raises(ValueError, match=r"slot_mapping\[0\] \(64\) is not a "
                                         r"slot of the 4 x 16 pool"):
        simdattn.VarlenPlan(pool, slot_mapping=[64], **meta)
    with pytest.raises(ValueError, match="block_table has 2 rows"):
        simdattn.VarlenPlan(pool, query_start_loc=[0, 1], seq_lens=[3],
                            block_table=[[2], [1]])
    with pytest.raises(ValueError, match=r"\(7\) is not a block of the 4"):
        simdattn.VarlenPlan(pool, query_start_loc=[0, 1], seq_lens=[3],
                            block_table=[[7, -1]])
    with pytest.raises(TypeError, match="int32 or int64"):
        simdattn.VarlenPlan(pool, query_start_loc=torch.tensor([0., 1.]),
                            seq_lens=[3], block_table=[[2, -1]])
    plan = simdattn.VarlenPlan(pool, slot_mapping=[35], **meta)
    q = torch.randn(1, HEADS, DIM)
    with pytest.raises(TypeError, match="query has dtype torch.float16"):
        plan.attention(q.half(), pool)
    other = simdattn.allocate_kv_pages("int8", 8, BLOCK, KV_HEADS, DIM)
    with pytest.raises(ValueError, match="differ from the planned shape"):
        plan.attention(q, other)
    with pytest.raises(ValueError, match="keys has 2 tokens but the plan's "
                                         "step 1"):
        plan.write(torch.randn(2, KV_HEADS, DIM), torch.randn(2, KV_HEADS,
                                                              DIM), pool)
    assert torch.equal(pool.key_cache, before)
    with pytest.raises(TypeError, match="key_cache has dtype torch.float32"):
        simdattn.KVPages(torch.zeros(4, 2, 16, 32), torch.zeros(4, 2, 16, 32),
                         dtype="bf16")
    with pytest.raises(ValueError, match="key_scales is None"):
        simdattn.KVPages(pool.key_cache, pool.value_cache, dtype="int8")
    with pytest.raises(ValueError, match="value_cache .* must have "
                                         "key_cache's blocks"):
        simdattn.KVPages(pool.key_cache, pool.value_cache[:2], dtype="int8",
                         key_scales=pool.key_scales,
                         value_scales=pool.value_scales)


def test_torch_ops_are_the_functions():
    import simdattn.ops  # noqa: F401  Registers the ops.
    pool = simdattn.allocate_kv_pages("bf16", 4, BLOCK, KV_HEADS, DIM)
    k, v = torch.randn(3, KV_HEADS, DIM), torch.randn(3, KV_HEADS, DIM)
    torch.ops.simdattn.write_kv_slots(k, v, pool.key_cache, pool.value_cache,
                                      torch.tensor([16, 17, 18]), "bf16")
    assert torch.equal(pool.key_cache[1, :, :3].transpose(0, 1),
                       k.to(torch.bfloat16))
    q = torch.randn(3, HEADS, DIM)
    meta = (torch.tensor([0, 3], dtype=torch.int32),
            torch.tensor([3], dtype=torch.int32),
            torch.tensor([[1]], dtype=torch.int32))
    want = simdattn.varlen_attention(q, pool, *meta)
    got = torch.ops.simdattn.varlen_attention(
        q, pool.key_cache, pool.value_cache, *meta, "bf16")
    assert torch.equal(got, want)
    out = torch.empty_like(q)
    ret = torch.ops.simdattn.varlen_attention.out(
        q, pool.key_cache, pool.value_cache, *meta, "bf16", out=out)
    assert ret is out and torch.equal(out, want)
    with pytest.raises(ValueError, match="not a block of the 4"):
        torch.ops.simdattn.varlen_attention(
            q, pool.key_cache, pool.value_cache, meta[0], meta[1],
            torch.tensor([[9]], dtype=torch.int32), "bf16")


def _bad_inputs():
    """(name, call(pool, plan), exception, message fragment): every kind of
    bad input the serving API names."""
    T = torch.tensor
    i32 = torch.int32
    q = torch.randn(2, HEADS, DIM)
    k = torch.randn(2, KV_HEADS, DIM)
    meta = dict(query_start_loc=[0, 2], seq_lens=[5], block_table=[[0, 1]])
    V = simdattn.VarlenPlan
    return [
        ("starts not from 0", lambda p, _: V(p, [1, 2], [5], [[0, 1]]),
         ValueError, "query_start_loc[0] (1) is not 0"),
        ("starts decreasing", lambda p, _: V(p, [0, 2, 1], [5, 5],
                                             [[0, 1], [2, 3]]),
         ValueError, "is less than query_start_loc[1]"),
        ("starts negative", lambda p, _: V(p, [0, -2], [5], [[0, 1]]),
         ValueError, "query_start_loc[1] is -2"),
        ("starts and lens disagree", lambda p, _: V(p, [0, 2, 3], [5],
                                                    [[0, 1]]),
         ValueError, "expected len(seq_lens) + 1"),
        ("starts float dtype", lambda p, _: V(p, T([0.0, 2.0]), [5],
                                              [[0, 1]]),
         TypeError, "int32 or int64"),
        ("starts 2-D", lambda p, _: V(p, T([[0, 2]], dtype=i32), [5],
                                      [[0, 1]]),
         ValueError, "must have 1 dimension"),
        ("length below its queries", lambda p, _: V(p, [0, 2], [1], [[0, 1]]),
         ValueError, "is less than its 2 queries"),
        ("length over the table", lambda p, _: V(p, [0, 2], [40], [[0, 1]]),
         ValueError, "exceeds the capacity (32)"),
        ("lens negative", lambda p, _: V(p, [0, 2], [-5], [[0, 1]]),
         ValueError, "seq_lens[0] is -5"),
        ("table rows", lambda p, _: V(p, [0, 2], [5], [[0, 1], [2, 3]]),
         ValueError, "block_table has 2 rows"),
        ("table entry past the pool", lambda p, _: V(p, [0, 2], [5], [[9, 1]]),
         ValueError, "(9) is not a block of the 4"),
        ("table entry released", lambda p, _: V(p, [0, 2], [5], [[-1, 1]]),
         ValueError, "released"),
        ("table entry below -1", lambda p, _: V(p, [0, 2], [5], [[-7, 1]]),
         ValueError, "a block index, or -1"),
        ("table ragged", lambda p, _: V(p, [0, 2], [5], [[0, 1], [2]]),
         ValueError, "rows differ in length"),
        ("slot past the pool", lambda p, _: V(p, slot_mapping=[3, 64], **meta),
         ValueError, "slot_mapping[1] (64) is not a slot of the 4 x 16"),
        ("slot twice", lambda p, _: V(p, slot_mapping=[3, 3], **meta),
         ValueError, "slot 3 appears twice"),
        ("slots count", lambda p, _: V(p, slot_mapping=[3], **meta),
         ValueError, "slot_mapping has 1 entries"),
        ("positions count", lambda p, _: V(p, positions=[3], **meta),
         ValueError, "positions has 1 entries"),
        ("tree without offsets", lambda p, _: V(p, tree_bits=[1], **meta),
         ValueError, "tree_bits and tree_offsets come together"),
        ("max_window negative", lambda p, _: V(p, max_window=-1, **meta),
         ValueError, "max_window is -1"),
        ("query dtype", lambda p, s: s.attention(q.double(), p),
         TypeError, "query has dtype torch.float64"),
        ("query rank", lambda p, s: s.attention(q[0], p),
         ValueError, "query must have 3 dimensions"),
        ("query tokens", lambda p, s: s.attention(q[:1], p),
         ValueError, "q has 1 tokens but the plan's step 2"),
        ("query head_dim", lambda p, s: s.attention(q[..., :16], p),
         ValueError, "head_dim"),
        ("query heads not a multiple", lambda p, s: s.attention(q[:, :3], p),
         ValueError, "not a multiple of the cache's kv_heads"),
        ("query last dim strided", lambda p, s: s.attention(q[..., ::2], p),
         TypeError, "last dimension is not contiguous"),
        ("out shape", lambda p, s: s.attention(q, p, out=torch.empty(2, 4, 8)),
         ValueError, "out has shape"),
        ("out read-only", lambda p, s: s.attention(
            q.numpy(), p, out=_readonly((2, HEADS, DIM))),
         ValueError, "read-only"),
        ("window wider than planned", lambda p, _: V(p, max_window=4, **meta)
         .attention(q, p, window=8), ValueError, "must lie in [1, 4]"),
        ("window negative", lambda p, s: s.attention(q, p, window=-1),
         ValueError, "window is -1"),
        ("softcap NaN", lambda p, s: s.attention(q, p, softcap=float("nan")),
         ValueError, "softcap is nan"),
        ("scale infinite", lambda p, s: s.attention(q, p, scale=float("inf")),
         ValueError, "scale is inf"),
        ("sinks count", lambda p, s: s.attention(q, p, sinks=[0.0]),
         ValueError, "sinks has 1 values but q has 4 heads"),
        ("query requires grad", lambda p, s: s.attention(
            q.clone().requires_grad_(), p), TypeError, "requires grad"),
        ("pages of another shape", lambda p, s: s.attention(
            q, simdattn.allocate_kv_pages("int8", 4, BLOCK, KV_HEADS, 2 * DIM)),
         ValueError, "differ from the planned shape"),
        ("write without slots", lambda p, s: s.write(k, k, p),
         ValueError, "has no slot_mapping"),
        ("write key tokens", lambda p, _: V(p, slot_mapping=[3, 4], **meta)
         .write(k[:1], k[:1], p), ValueError, "keys has 1 tokens"),
        ("write value shape", lambda p, _: V(p, slot_mapping=[3, 4], **meta)
         .write(k, k[:, :1], p), ValueError, "values has shape"),
        ("write rope theta", lambda p, _: V(p, slot_mapping=[3, 4], **meta)
         .write(k, k, p, rope_theta=-1.0), ValueError, "theta"),
        ("pool dtype name", lambda p, _: simdattn.KVPages(
            p.key_cache, p.value_cache, dtype="fp4"), ValueError,
         "dtype 'fp4' is not a cache type"),
        ("pool tensor rank", lambda p, _: simdattn.KVPages(
            p.key_cache[0], p.value_cache[0], dtype="int8"), ValueError,
         "must have 4 dimensions"),
        ("pool scales shape", lambda p, _: simdattn.KVPages(
            p.key_cache, p.value_cache, dtype="int8",
            key_scales=p.key_scales[:1], value_scales=p.value_scales),
         ValueError, "key_scales has shape"),
        ("latent without value_dim", lambda p, _: simdattn.KVPages(
            p.key_cache, None, dtype="int8", key_scales=p.key_scales),
         ValueError, "latent pool"),
        ("q8_0 rows not whole blocks", lambda p, _: simdattn.KVPages(
            torch.zeros(4, 2, 16, 33, dtype=torch.uint8),
            torch.zeros(4, 2, 16, 33, dtype=torch.uint8), dtype="q8_0"),
         ValueError, "not whole q8_0 elements of 34 bytes"),
    ]


def _readonly(shape):
    a = np.zeros(shape, np.float32)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("case", _bad_inputs(), ids=lambda c: c[0])
def test_bad_serving_inputs_name_themselves_and_change_nothing(case):
    _, call, error, fragment = case
    pool = simdattn.allocate_kv_pages("int8", 4, BLOCK, KV_HEADS, DIM)
    pool.key_cache.fill_(3)
    pool.key_scales.fill_(0.5)
    plan = simdattn.VarlenPlan(pool, [0, 2], [5], [[0, 1]])
    before = (pool.key_cache.clone(), pool.value_cache.clone(),
              pool.key_scales.clone())
    with pytest.raises(error) as e:
        call(pool, plan)
    assert fragment in str(e.value), str(e.value)
    assert torch.equal(pool.key_cache, before[0])
    assert torch.equal(pool.value_cache, before[1])
    assert torch.equal(pool.key_scales, before[2])


def test_draft_trees_pass_through_plans_and_ops():
    """A verification of 4 drafts as a chain (each sees its ancestors: the
    causal rows) and as a star (each sees the root and itself)."""
    torch.manual_seed(7)
    pool = simdattn.allocate_kv_pages("f32", 4, BLOCK, KV_HEADS, DIM)
    k, v = torch.randn(20, KV_HEADS, DIM), torch.randn(20, KV_HEADS, DIM)
    simdattn.write_kv_slots(k, v, pool, list(range(16, 36)))
    q = torch.randn(4, HEADS, DIM)
    meta = dict(query_start_loc=[0, 4], seq_lens=[20], block_table=[[1, 2]])

    def bits(sees):
        word = 0
        for i in range(4):
            for j in range(4):
                if sees(i, j):
                    word |= 1 << (i * 4 + j)
        return [word]

    chain = bits(lambda i, j: j <= i)
    star = bits(lambda i, j: j == 0 or j == i)
    causal = simdattn.VarlenPlan(pool, **meta).attention(q, pool)
    for tree in (chain, star):
        plan = simdattn.VarlenPlan(pool, tree_bits=tree, tree_offsets=[0],
                                   **meta)
        got = plan.attention(q, pool)
        again = simdattn.varlen_attention(q, pool, tree_bits=tree,
                                          tree_offsets=[0], **meta)
        assert torch.equal(got, again)
        if tree is chain:
            assert (got - causal).abs().max() < 1e-6
        else:  # Draft 2 sees the prefix, the root and itself.
            assert (got[1] - causal[1]).abs().max() < 1e-6
            assert (got[2] - causal[2]).abs().max() > 1e-3
