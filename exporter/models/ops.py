"""Graph building blocks shared by the step modules; each keeps the HTP integer path (see docs/NOTES.md)."""

from __future__ import annotations

import torch


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
    """GQA over [past | new] keys by slicing KV heads (no Expand); q [1, H, AR, D] -> [1, AR, H * D]."""
    n_heads, n_kv, ar, head_dim = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    group = n_heads // n_kv
    keys = torch.cat([past_k, k], dim=2)
    values = torch.cat([past_v, v], dim=2)
    outs = []
    for j in range(n_kv):
        qj = q[:, j * group : (j + 1) * group]
        scores = torch.matmul(qj, keys[:, j : j + 1].transpose(2, 3)) * scale + mask
        outs.append(torch.matmul(torch.softmax(scores, dim=-1), values[:, j : j + 1]))
    return torch.cat(outs, dim=1).transpose(1, 2).reshape(1, ar, n_heads * head_dim)
