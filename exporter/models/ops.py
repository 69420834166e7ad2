"""Graph building blocks shared by the step modules; each keeps the HTP integer path (see docs/NOTES.md)."""

from __future__ import annotations

import torch


def mean_sq_last(x: torch.Tensor) -> torch.Tensor:
    """mean(x^2) over the last axis, keepdim: the RMSNorm statistic."""
    return x.pow(2).mean(-1, keepdim=True)


def mean_sq_last_pooled(x: torch.Tensor) -> torch.Tensor:
    """The same statistic as a mean over the two innermost axes of a 4-D view: XNNPACK delegates a
    mean only in that form (global average pooling), so ExecuTorch programs use this one and stay in
    one delegate instead of splitting at every norm."""
    shape = x.shape
    return x.pow(2).reshape(1, -1, shape[-1], 1).mean((2, 3), keepdim=True).reshape(*shape[:-1], 1)


def rotary_tables(head_dim: int, context: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sign-folded sin tables [context, head_dim]: rotate(x) = x * cos + swap_halves(x) * sin."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(torch.arange(context, dtype=torch.float32), inv_freq)
    cos = torch.cat([freqs.cos(), freqs.cos()], dim=-1)
    sin_signed = torch.cat([-freqs.sin(), freqs.sin()], dim=-1)
    return cos, sin_signed


def swap_halves(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([x[..., half:], x[..., :half]], dim=-1)


def grouped_attention(q, k, v, past_k, past_v, mask, scale: float) -> torch.Tensor:
    """GQA over [past | new] keys by slicing KV heads (no Expand); q [1, H, AR, D] -> [1, AR, H * D].

    The query heads of one KV head are folded into the row axis ([1, group * AR, D]) and both
    products are explicit batch-1 ``bmm``: a 4-D ``matmul`` decomposes into an expand that XNNPACK
    leaves outside its delegate, splitting every layer into several delegate calls."""
    n_heads, n_kv, ar, head_dim = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    group = n_heads // n_kv
    keys = torch.cat([past_k, k], dim=2)
    values = torch.cat([past_v, v], dim=2)
    outs = []
    for j in range(n_kv):
        # with one KV head the slices would be identities (alias ops) and the concat a one-input
        # cat: XNNPACK delegates neither, so they are not emitted
        qj = q if n_kv == 1 else q[:, j * group : (j + 1) * group]
        kj, vj = (keys, values) if n_kv == 1 else (keys[:, j : j + 1], values[:, j : j + 1])
        kv_len = kj.shape[2]
        scores = torch.bmm(qj.reshape(1, group * ar, head_dim), kj.reshape(1, kv_len, head_dim).transpose(1, 2))
        scores = scores.reshape(1, group, ar, kv_len) * scale + mask
        probs = torch.softmax(scores, dim=-1).reshape(1, group * ar, kv_len)
        outs.append(torch.bmm(probs, vj.reshape(1, kv_len, head_dim)).reshape(1, group, ar, head_dim))
    o = outs[0] if n_kv == 1 else torch.cat(outs, dim=1)
    return o.transpose(1, 2).reshape(1, ar, n_heads * head_dim)
