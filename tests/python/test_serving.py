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
