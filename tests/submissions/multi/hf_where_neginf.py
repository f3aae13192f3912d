# CODES:
# STYLE: HF-style transpose_for_scores / permute().contiguous().view(); masks with -inf via torch.where, but rows with no valid key are given their raw scores (never all -inf, so no NaN) and zeroed after the softmax
import math
from typing import Optional, Tuple

import torch
from torch import Tensor, nn


def head_weight_shape(d: int, d_total: int, num_heads: int) -> Tuple[int, int]:
    sizes = {"d": d, "d_total": d_total, "num_heads": num_heads}
    bad = [k for k, v in sizes.items() if type(v) is not int or v <= 0]
    if bad:
        raise ValueError(f"{', '.join(bad)} must be positive integers")
    if d_total % num_heads:
        raise ValueError(f"The hidden size ({d_total}) is not a multiple of the number of attention heads ({num_heads})")
    return (d, d_total // num_heads)


def project(H: Tensor, W: Tensor) -> Tensor:
    return torch.matmul(H, W)


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    return torch.matmul(H[:, None], W_heads)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    _, head_size = head_weight_shape(1, x.size(-1), num_heads)
    return x.view(x.size()[:-1] + (num_heads, head_size)).permute(0, 2, 1, 3)


def concat_heads(x: Tensor) -> Tensor:
    x = x.permute(0, 2, 1, 3).contiguous()
    return x.view(x.size()[:-2] + (x.size(-2) * x.size(-1),))


def masked_softmax(scores: Tensor, valid_lens: Optional[Tensor] = None) -> Tensor:
    if valid_lens is None:
        return nn.functional.softmax(scores, dim=-1)
    lens = valid_lens.to(scores.device)
    lens = lens.reshape(lens.size(0), *([1] * (scores.dim() - 3)), -1, 1)
    keep = torch.arange(scores.size(-1), device=scores.device) < lens
    empty = ~keep.any(dim=-1, keepdim=True)            # rows with no valid key at all
    neg_inf = torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device)
    probs = nn.functional.softmax(torch.where(keep | empty, scores, neg_inf), dim=-1)
    return probs.masked_fill(~keep, 0.0)


def attention_pool(Q: Tensor, K: Tensor, V: Tensor,
                   valid_lens: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    attention_scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(Q.size(-1))
    attention_probs = masked_softmax(attention_scores, valid_lens)
    return torch.matmul(attention_probs, V), attention_probs


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, *, d_total: Optional[int] = None,
                 bias: bool = False, dropout: float = 0.0):
        super().__init__()
        all_head_size = d_model if d_total is None else d_total
        _, self.attention_head_size = head_weight_shape(d_model, all_head_size, num_heads)
        self.num_attention_heads = num_heads
        self.all_head_size = all_head_size
        self.W_q = nn.Linear(d_model, all_head_size, bias=bias)
        self.W_k = nn.Linear(d_model, all_head_size, bias=bias)
        self.W_v = nn.Linear(d_model, all_head_size, bias=bias)
        self.W_o = nn.Linear(all_head_size, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: Optional[Tensor] = None

    def transpose_for_scores(self, x: Tensor) -> Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Optional[Tensor] = None) -> Tensor:
        query_layer = self.transpose_for_scores(self.W_q(queries))
        key_layer = self.transpose_for_scores(self.W_k(keys))
        value_layer = self.transpose_for_scores(self.W_v(values))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = masked_softmax(attention_scores, valid_lens)
        self.attention_weights = attention_probs
        context_layer = torch.matmul(self.dropout(attention_probs), value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        context_layer = context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))
        return self.W_o(context_layer)
