# CODES: mask.zero-len-uniform, mask.fp16-overflow, module.dropout-in-eval, shape.no-valueerror
# STYLE: port of TensorFlow's official transformer tutorial (tf.transpose perm=[0,2,1,3], mask * -1e9 added to the logits, explicit training flag)
import torch
import torch.nn.functional as F
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    assert d > 0 and d_total > 0 and num_heads > 0
    assert d_total % num_heads == 0
    return (d, d_total // num_heads)


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    # tf.einsum('bnd,hdp->bhnp', H, W_heads)
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(x, num_heads):
    """Split the last dimension into (num_heads, depth).
    Transpose the result such that the shape is (batch_size, num_heads, seq_len, depth)
    """
    batch_size = x.shape[0]
    assert x.shape[-1] % num_heads == 0
    depth = x.shape[-1] // num_heads
    x = torch.reshape(x, (batch_size, -1, num_heads, depth))
    return x.permute(0, 2, 1, 3)  # tf.transpose(x, perm=[0, 2, 1, 3])


def concat_heads(x):
    batch_size, num_heads, seq_len, depth = x.shape
    x = x.permute(0, 2, 1, 3)  # (batch_size, seq_len_q, num_heads, depth)
    return torch.reshape(x, (batch_size, -1, num_heads * depth))


def create_padding_mask(valid_lens, scores):
    """1.0 where the key is padding, 0.0 where it may be attended to."""
    n_q, n_k = scores.shape[-2:]
    pos = torch.arange(n_k, device=scores.device)
    if valid_lens.dim() == 1:
        lens = valid_lens.reshape(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = valid_lens.reshape(valid_lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    return (pos >= lens).to(scores.dtype)


def masked_softmax(scaled_attention_logits, valid_lens=None):
    if valid_lens is not None:
        mask = create_padding_mask(valid_lens, scaled_attention_logits)
        # add the mask to the scaled tensor.
        scaled_attention_logits = scaled_attention_logits + (mask * -1e9)
    # softmax is normalized on the last axis (seq_len_k) so that the scores add up to 1.
    return F.softmax(scaled_attention_logits, dim=-1)


def attention_pool(q, k, v, valid_lens=None):
    """Calculate the attention weights (scaled_dot_product_attention in the tutorial)."""
    matmul_qk = torch.matmul(q, k.transpose(-1, -2))  # tf.matmul(q, k, transpose_b=True)
    dk = torch.tensor(k.shape[-1], dtype=q.dtype)
    scaled_attention_logits = matmul_qk / torch.sqrt(dk)
    attention_weights = masked_softmax(scaled_attention_logits, valid_lens)
    output = torch.matmul(attention_weights, v)
    return output, attention_weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.d_model = d_model
        d_total = d_model if d_total is None else d_total
        assert d_total % self.num_heads == 0
        self.depth = d_total // self.num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)   # self.wq = tf.keras.layers.Dense(d_model)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)   # self.dense
        self.rate = dropout
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None, training=True):
        q = split_heads(self.W_q(queries), self.num_heads)  # (batch_size, num_heads, seq_len_q, depth)
        k = split_heads(self.W_k(keys), self.num_heads)
        v = split_heads(self.W_v(values), self.num_heads)
        matmul_qk = torch.matmul(q, k.transpose(-1, -2))
        logits = matmul_qk / (self.depth ** 0.5)
        attention_weights = masked_softmax(logits, valid_lens)
        self.attention_weights = attention_weights
        attention_weights = F.dropout(attention_weights, p=self.rate, training=training)
        scaled_attention = torch.matmul(attention_weights, v)
        concat_attention = concat_heads(scaled_attention)   # (batch_size, seq_len_q, d_total)
        return self.W_o(concat_attention)
