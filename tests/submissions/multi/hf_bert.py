# CODES: module.missing-out-proj, mask.zero-len-uniform, device.host-sync
# STYLE: Hugging Face BertSelfAttention: transpose_for_scores with x.view(new_x_shape).permute, context_layer.permute(...).contiguous().view, extended mask with torch.finfo(dtype).min, "nothing to mask" shortcut
import math
from typing import Optional, Tuple

import torch
from torch import nn


def head_weight_shape(d: int, d_total: int, num_heads: int) -> Tuple[int, int]:
    for value in (d, d_total, num_heads):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"sizes must be positive integers, got {value}")
    if d_total % num_heads != 0:
        raise ValueError(
            f"The hidden size ({d_total}) is not a multiple of the number of attention "
            f"heads ({num_heads})"
        )
    return (d, int(d_total / num_heads))


def project(H: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return torch.matmul(H, W)


def project_heads(H: torch.Tensor, W_heads: torch.Tensor) -> torch.Tensor:
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    head_weight_shape(1, x.size(-1), num_heads)  # validates num_heads
    new_x_shape = x.size()[:-1] + (num_heads, x.size(-1) // num_heads)
    x = x.view(new_x_shape)
    return x.permute(0, 2, 1, 3)


def concat_heads(context_layer: torch.Tensor) -> torch.Tensor:
    context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
    new_context_layer_shape = context_layer.size()[:-2] + (context_layer.size(-2) * context_layer.size(-1),)
    return context_layer.view(new_context_layer_shape)


def get_extended_attention_mask(valid_lens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """(batch, 1.., from_seq or 1, to_seq) boolean mask, True where the key is real."""
    to_seq = scores.size(-1)
    lens = valid_lens.to(scores.device)
    if lens.dim() == 1:
        lens = lens[(...,) + (None,) * (scores.dim() - 1)]
    else:
        lens = lens.reshape(lens.size(0), *([1] * (scores.dim() - 3)), scores.size(-2), 1)
    return torch.arange(to_seq, device=scores.device) < lens


def masked_softmax(attention_scores: torch.Tensor, valid_lens: Optional[torch.Tensor] = None) -> torch.Tensor:
    if valid_lens is not None:
        attention_mask = get_extended_attention_mask(valid_lens, attention_scores)
        if not attention_mask.all():
            attention_scores = attention_scores.masked_fill(
                ~attention_mask, torch.finfo(attention_scores.dtype).min)
    # Normalize the attention scores to probabilities.
    return nn.functional.softmax(attention_scores, dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    attention_scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(Q.size(-1))
    attention_probs = masked_softmax(attention_scores, valid_lens)
    return torch.matmul(attention_probs, V), attention_probs


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        all_head_size = d_model if d_total is None else d_total
        _, self.attention_head_size = head_weight_shape(d_model, all_head_size, num_heads)
        self.num_attention_heads = num_heads
        self.all_head_size = all_head_size

        self.W_q = nn.Linear(d_model, self.all_head_size, bias=bias)
        self.W_k = nn.Linear(d_model, self.all_head_size, bias=bias)
        self.W_v = nn.Linear(d_model, self.all_head_size, bias=bias)
        # BertSelfOutput.dense
        self.W_o = nn.Linear(self.all_head_size, d_model, bias=bias)

        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, queries, keys, values, valid_lens=None):
        query_layer = self.transpose_for_scores(self.W_q(queries))
        key_layer = self.transpose_for_scores(self.W_k(keys))
        value_layer = self.transpose_for_scores(self.W_v(values))

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = masked_softmax(attention_scores, valid_lens)
        self.attention_weights = attention_probs

        # This is actually dropping out entire tokens to attend to, which might
        # seem a bit unusual, but is taken from the original Transformer paper.
        attention_probs = self.dropout(attention_probs)

        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(new_context_layer_shape)
        return context_layer
