"""Drop-in torch.nn.Modules for the seed notebooks' attention classes
(chapter 3 of "Build a Large Language Model (From Scratch)"):

    from simdattn.torch import (SelfAttention_v1, SelfAttention_v2,
                                CausalAttention, MultiHeadAttentionWrapper,
                                MultiHeadAttention)

Each takes the seed's constructor arguments, creates the seed's parameters
and buffers in the seed's order (so torch.manual_seed gives the same initial
weights) under the seed's names (so state_dict() and load_state_dict() are
unchanged), and runs its forward in simdattn's C++ module of the same name
(projections and attention), which reads the parameters' current values
(reloaded when a parameter changes, by data_ptr and version).

What differs from the seed:
- Inference only. The parameters are created with requires_grad=False, so
  the seed's code runs as written (its outputs then have no grad_fn); a
  forward with grad mode on and an input or a parameter that requires grad
  raises TypeError: simdattn computes no backward.
- Training mode with dropout > 0 (the seed's nn.Dropout on the attention
  weights) runs the seed's own torch code, so that the dropout draws come
  from torch's generator exactly as the seed's do; every other forward (eval
  mode, or dropout 0) runs in simdattn.
- SelfAttention_v1 and SelfAttention_v2 also take a batch (b, T, d_in), each
  sequence on its own (the seeds' `keys.T` takes one sequence (T, d_in)).
"""

import torch
from torch import nn

from . import _simdattn as _C
from . import ops  # noqa: F401  Registers torch.ops.simdattn.*.

__all__ = ["SelfAttention_v1", "SelfAttention_v2", "CausalAttention",
           "MultiHeadAttentionWrapper", "MultiHeadAttention",
           "LlamaAttention"]


class _DropIn(nn.Module):
    """The machinery the drop-ins share: the C++ module, kept in step with
    the parameters, and the checks of forward's input."""

    _kind = None  # The C++ module's name (MakeModule in src/module.cc).

    def _finish_init(self, **native_args):
        self.requires_grad_(False)
        self._native_args = native_args
        self._native = None
        self._native_key = None

    def _native_module(self):
        params = list(self.named_parameters())
        key = tuple((name, p.data_ptr(), p._version, p.dtype, tuple(p.shape))
                    for name, p in params)
        if self._native is None:
            self._native = _C.Module(self._kind, **self._native_args)
        if key != self._native_key:
            self._native.load_state_dict(
                {name: p.detach().contiguous() for name, p in params})
            self._native_key = key
        return self._native

    def _check_input(self, x, dims):
        name = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"simdattn.torch.{name}: x must be a torch "
                            f"tensor, not {type(x).__name__}")
        if torch.is_grad_enabled() and (
                x.requires_grad or any(p.requires_grad
                                       for p in self.parameters())):
            what = "x" if x.requires_grad else "a parameter"
            raise TypeError(
                f"simdattn.torch.{name}: {what} requires grad, and simdattn "
                f"does not support autograd (it computes no backward). Run "
                f"it under torch.no_grad(), or train with the seed's torch "
                f"module and load its state_dict here.")
        if x.dtype != torch.float32:
            raise TypeError(f"simdattn.torch.{name}: x has dtype {x.dtype}: "
                            f"expected torch.float32")
        if x.device.type != "cpu":
            raise TypeError(f"simdattn.torch.{name}: x is on device "
                            f"'{x.device.type}': simdattn runs on the CPU")
        if x.dim() not in dims:
            raise ValueError(
                f"simdattn.torch.{name}: x has shape {tuple(x.shape)}: "
                f"expected {' or '.join(str(d) for d in dims)} dimensions")
        if x.dim() > 0 and x.shape[-1] > 1 and x.stride(-1) != 1:
            x = x.contiguous()
        return x

    def _simdattn_forward(self, x):
        native = self._native_module()
        y = torch.empty(tuple(x.shape[:-1]) + (native.out_features,),
                        dtype=torch.float32)
        native.forward(x, y)
        return y

    def _training_dropout(self):
        return False

    def forward(self, x):
        x = self._check_input(x, self._input_dims)
        if self._training_dropout():
            return self._torch_forward(x)
        return self._simdattn_forward(x)


class SelfAttention_v1(_DropIn):
    """The seed's SelfAttention_v1: W_query, W_key, W_value as
    nn.Parameter(torch.rand(d_in, d_out)); x (T, d_in) -> (T, d_out)."""

    _kind = "SelfAttention_v1"
    _input_dims = (2, 3)

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        self._finish_init(d_in=d_in, d_out=d_out)


class SelfAttention_v2(_DropIn):
    """The seed's SelfAttention_v2: nn.Linear(d_in, d_out, bias=qkv_bias)
    projections; x (T, d_in) -> (T, d_out)."""

    _kind = "SelfAttention_v2"
    _input_dims = (2, 3)

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self._finish_init(d_in=d_in, d_out=d_out, qkv_bias=bool(qkv_bias))


class CausalAttention(_DropIn):
    """The seed's CausalAttention: x (b, T, d_in) -> (b, T, d_out), causal,
    dropout on the attention weights in training."""

    _kind = "CausalAttention"
    _input_dims = (3,)

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('mask', torch.triu(
            torch.ones(context_length, context_length), diagonal=1))
        self._finish_init(d_in=d_in, d_out=d_out,
                          context_length=context_length,
                          dropout=float(dropout), qkv_bias=bool(qkv_bias))

    def _training_dropout(self):
        return self.training and self.dropout.p > 0

    def _torch_forward(self, x):  # The seed's forward, verbatim.
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1
        )
        attn_weights = self.dropout(attn_weights)
        context_vec = attn_weights @ values
        return context_vec


class MultiHeadAttentionWrapper(_DropIn):
    """The book's MultiHeadAttentionWrapper: num_heads CausalAttention heads
    (`heads`, an nn.ModuleList), outputs concatenated: (b, T, num_heads *
    d_out)."""

    _kind = "MultiHeadAttentionWrapper"
    _input_dims = (3,)

    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)]
        )
        self._finish_init(d_in=d_in, d_out=d_out,
                          context_length=context_length,
                          dropout=float(dropout), num_heads=num_heads,
                          qkv_bias=bool(qkv_bias))

    def _training_dropout(self):
        return self.training and any(h.dropout.p > 0 for h in self.heads)

    def _torch_forward(self, x):
        return torch.cat([head._torch_forward(x) for head in self.heads],
                         dim=-1)


class MultiHeadAttention(_DropIn):
    """The seed's MultiHeadAttention: d_out split into num_heads heads,
    out_proj; x (b, T, d_in) -> (b, T, d_out)."""

    _kind = "MultiHeadAttention"
    _input_dims = (3,)

    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        assert (d_out % num_heads == 0), \
            "d_out must be divisible by num_heads"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1)
        )
        self._finish_init(d_in=d_in, d_out=d_out,
                          context_length=context_length,
                          dropout=float(dropout), num_heads=num_heads,
                          qkv_bias=bool(qkv_bias))

    def _training_dropout(self):
        return self.training and self.dropout.p > 0

    def _torch_forward(self, x):  # The seed's forward, verbatim.
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)
        keys = keys.transpose(1, 2)
        queries = queries.transpose(1, 2)
        values = values.transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec)
        return context_vec


class LlamaAttention(_DropIn):
    """Hugging Face's LlamaAttention (Qwen2's biases with attention_bias) as
    one layer of a serving step: q_proj, k_proj, v_proj and o_proj under HF's
    names and shapes, so a checkpoint's self_attn tensors load as they are.

    LlamaAttention(hidden_size, num_heads, num_key_value_heads=None,
                   rope_theta=10000.0, attention_bias=False, head_dim=None)

    forward_step(hidden_states, plan, pages): hidden_states
    (num_tokens, hidden_size) float32 packs the step's new tokens as
    plan (a simdattn.VarlenPlan with slot_mapping) describes them; the
    queries and keys are rotated at the step's positions (NeoX's halves),
    the keys and values stored at its slots in `pages` (this layer's
    KVPages), attention is causal (draft trees as the plan gives them), and
    o_proj maps back to hidden_size. Returns (num_tokens, hidden_size).
    Inference only, as the seed's drop-ins.
    """

    _kind = "LlamaAttention"
    _input_dims = (2,)

    def __init__(self, hidden_size, num_heads, num_key_value_heads=None,
                 rope_theta=10000.0, attention_bias=False, head_dim=None):
        super().__init__()
        kv_heads = num_key_value_heads or num_heads
        head_dim = head_dim or hidden_size // num_heads
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.num_key_value_heads = kv_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim,
                                bias=attention_bias)
        self.k_proj = nn.Linear(hidden_size, kv_heads * head_dim,
                                bias=attention_bias)
        self.v_proj = nn.Linear(hidden_size, kv_heads * head_dim,
                                bias=attention_bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size,
                                bias=attention_bias)
        self._finish_init(d_in=hidden_size, d_out=num_heads * head_dim,
                          num_heads=num_heads, num_kv_heads=kv_heads,
                          qkv_bias=bool(attention_bias),
                          rope_theta=float(rope_theta),
                          out_bias=bool(attention_bias))

    def forward_step(self, hidden_states, plan, pages):
        x = self._check_input(hidden_states, self._input_dims)
        native = self._native_module()
        y = torch.empty(x.shape[0], native.out_features, dtype=torch.float32)
        _C.module_forward_step(native, x, plan, pages, y)
        return y

    def forward(self, x):
        raise TypeError("simdattn.torch.LlamaAttention runs serving steps: "
                        "call forward_step(hidden_states, plan, pages)")
