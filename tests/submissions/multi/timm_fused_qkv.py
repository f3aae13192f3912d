# CODES: module.self-attention-only, dtype.forces-float32
# STYLE: timm vision_transformer.Attention: qkv stacked then reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0), q * self.scale, softmax in float32 "for fp16 stability"
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def _check_positive(**sizes) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} should be a positive int, got {value!r}")


def head_weight_shape(d: int, d_total: int, num_heads: int) -> Tuple[int, int]:
    _check_positive(d=d, d_total=d_total, num_heads=num_heads)
    if d_total % num_heads:
        raise ValueError("dim should be divisible by num_heads")
    return d, d_total // num_heads


def project(H: Tensor, W: Tensor) -> Tensor:
    return H @ W


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    return H.unsqueeze(1) @ W_heads


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    _check_positive(num_heads=num_heads)
    B, N, C = X.shape
    if C % num_heads:
        raise ValueError("dim should be divisible by num_heads")
    return X.reshape(B, N, num_heads, C // num_heads).permute(0, 2, 1, 3)


def concat_heads(X: Tensor) -> Tensor:
    B, H, N, D = X.shape
    return X.transpose(1, 2).reshape(B, N, H * D)


def _keep(scores: Tensor, valid_lens: Tensor) -> Tensor:
    n_q, n_k = scores.shape[-2:]
    lens = valid_lens.to(scores.device)
    lens = lens.reshape(lens.shape[0], *(1,) * (scores.dim() - 3), -1, 1)  # (B, 1.., N_q or 1, 1)
    return torch.arange(n_k, device=scores.device) < lens


def masked_softmax(scores: Tensor, valid_lens: Optional[Tensor] = None) -> Tensor:
    keep = None
    if valid_lens is not None:
        keep = _keep(scores, valid_lens)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    attn = scores.float().softmax(dim=-1).type_as(scores)
    if keep is not None:
        attn = attn.masked_fill(~keep, 0.0)
    return attn


def attention_pool(Q: Tensor, K: Tensor, V: Tensor,
                   valid_lens: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    q = Q * Q.shape[-1] ** -0.5
    attn = masked_softmax(q @ K.transpose(-2, -1), valid_lens)
    return attn @ V, attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, *, d_total: Optional[int] = None,
                 bias: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        dim = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, dim, num_heads)
        self.num_heads = num_heads
        self.dim = dim
        self.scale = self.head_dim ** -0.5
        self.W_q = nn.Linear(d_model, dim, bias=bias)
        self.W_k = nn.Linear(d_model, dim, bias=bias)
        self.W_v = nn.Linear(d_model, dim, bias=bias)
        self.attn_drop = nn.Dropout(dropout)
        self.W_o = nn.Linear(dim, d_model, bias=bias)
        self.attention_weights: Optional[Tensor] = None

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Optional[Tensor] = None) -> Tensor:
        x = queries
        B, N, _ = x.shape
        qkv = torch.stack((self.W_q(x), self.W_k(x), self.W_v(x)), dim=2)
        qkv = qkv.reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)

        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = masked_softmax(attn, valid_lens)
        self.attention_weights = attn
        attn = self.attn_drop(attn)
        x = attn @ v

        x = x.transpose(1, 2).reshape(B, N, self.dim)
        x = self.W_o(x)
        return x
