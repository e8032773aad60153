"""torch.ops.simdattn.*: the registered ops, their out-variants, and the
package without torch."""
import os
import subprocess
import sys

import torch

import simdattn
import simdattn.torch  # noqa: F401  Registers the ops.
from reference import attention as ref_attention


def inputs():
    g = torch.Generator().manual_seed(3)
    return (torch.randn(2, 4, 5, 16, generator=g),
            torch.randn(2, 2, 9, 16, generator=g),
            torch.randn(2, 2, 9, 16, generator=g))


def test_sdpa_op_and_out_variant():
    q, k, v = inputs()
    kwargs = dict(causal=True, causal_offset=4, softcap=5.0)
    expected = simdattn.scaled_dot_product_attention(q, k, v, **kwargs)
    got = torch.ops.simdattn.sdpa(q, k, v, **kwargs)
    assert torch.equal(got, expected)
    out = torch.empty_like(expected)
    ret = torch.ops.simdattn.sdpa.out(q, k, v, out=out, **kwargs)
    assert ret.data_ptr() == out.data_ptr() and torch.equal(out, expected)


def test_sdpa_lse_ops():
    q, k, v = inputs()
    sinks = torch.tensor([0.5, 0.0, -1.0, 2.0])
    kl = torch.tensor([7, 9])
    out, lse = torch.ops.simdattn.sdpa_lse(q, k, v, sinks=sinks,
                                           key_lengths=kl,
                                           alibi_slopes=torch.tensor(
                                               simdattn.alibi_slopes(4)))
    ref, ref_lse = ref_attention(q, k, v, sinks=sinks.tolist(),
                                 key_lengths=kl.tolist(),
                                 alibi=simdattn.alibi_slopes(4))
    torch.testing.assert_close(out.double(), ref, atol=2e-6, rtol=2e-5)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)
    o2, l2 = torch.empty_like(out), torch.empty_like(lse)
    r = torch.ops.simdattn.sdpa_lse.out(q, k, v, sinks=sinks, key_lengths=kl,
                                        alibi_slopes=torch.tensor(
                                            simdattn.alibi_slopes(4)),
                                        out=o2, lse=l2)
    assert r[0].data_ptr() == o2.data_ptr() and r[1].data_ptr() == l2.data_ptr()
    assert torch.equal(o2, out) and torch.equal(l2, lse)


def test_ops_show_in_traces():
    q, k, v = inputs()

    def f(q, k, v):
        return torch.ops.simdattn.sdpa(q, k, v, causal=True)

    graph = torch.jit.trace(f, (q, k, v)).graph
    assert "simdattn::sdpa" in str(graph)


def test_import_without_torch():
    # The numpy API does not import torch.
    code = ("import sys, numpy as np, simdattn\n"
            "q = np.ones((1, 1, 2, 4), np.float32)\n"
            "o = simdattn.scaled_dot_product_attention(q, q, q, causal=True)\n"
            "assert 'torch' not in sys.modules\n"
            "assert np.allclose(o, 1.0)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in sys.path if p))
    subprocess.run([sys.executable, "-c", code], check=True, env=env,
                   timeout=60)
