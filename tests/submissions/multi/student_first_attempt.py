# CODES: shape.no-valueerror, mask.after-softmax, concat.no-transpose
# STYLE: a student's first attempt: lots of intermediate variables, explicit for-loops over the batch, asserts, print-debug leftovers
import math
import torch
import torch.nn as nn


def head_weight_shape(d, d_total, num_heads):
    # each head gets d_total / num_heads columns
    assert d > 0, "d must be positive"
    assert d_total > 0, "d_total must be positive"
    assert num_heads > 0, "need at least one head"
    assert d_total % num_heads == 0, "d_total has to be divisible by num_heads"
    cols_per_head = d_total // num_heads
    result = (d, cols_per_head)
    return result


def project(H, W):
    output = torch.matmul(H, W)
    return output


def project_heads(H, W_heads):
    H_expanded = H.unsqueeze(1)          # (batch, 1, n, d)
    output = torch.matmul(H_expanded, W_heads)   # broadcast over heads -> (batch, heads, n, p)
    return output


def split_heads(X, num_heads):
    batch_size = X.shape[0]
    seq_len = X.shape[1]
    total_dim = X.shape[2]
    assert num_heads > 0
    assert total_dim % num_heads == 0, "can't split evenly"
    head_dim = total_dim // num_heads
    all_batches = []
    for b in range(batch_size):
        x_b = X[b]                                        # (n, h*p)
        x_b = x_b.reshape(seq_len, num_heads, head_dim)   # (n, h, p)
        x_b = x_b.permute(1, 0, 2)                        # (h, n, p)
        all_batches.append(x_b)
    result = torch.stack(all_batches, dim=0)             # (batch, h, n, p)
    # print("split_heads:", X.shape, "->", result.shape)
    return result


def concat_heads(X):
    batch_size = X.shape[0]
    num_heads = X.shape[1]
    seq_len = X.shape[2]
    head_dim = X.shape[3]
    total_dim = num_heads * head_dim
    result = X.reshape(batch_size, seq_len, total_dim)
    return result


def masked_softmax(scores, valid_lens=None):
    # first do a normal softmax
    weights = torch.softmax(scores, dim=-1)
    if valid_lens is None:
        return weights
    num_keys = scores.shape[-1]
    key_positions = torch.arange(num_keys, device=scores.device)
    valid_lens = valid_lens.to(scores.device)
    masked_batches = []
    for b in range(scores.shape[0]):
        weights_b = weights[b]                 # (..., n_q, n_k)
        lens_b = valid_lens[b]                 # scalar or (n_q,)
        if valid_lens.dim() == 1:
            mask_b = key_positions < lens_b                    # (n_k,)
        else:
            mask_b = key_positions[None, :] < lens_b[:, None]  # (n_q, n_k)
        # then throw away the keys that are padding
        weights_b = weights_b * mask_b
        masked_batches.append(weights_b)
    result = torch.stack(masked_batches, dim=0)
    return result


def attention_pool(Q, K, V, valid_lens=None):
    head_dim = Q.shape[-1]
    K_transposed = K.transpose(-2, -1)
    raw_scores = torch.matmul(Q, K_transposed)
    scaled_scores = raw_scores / math.sqrt(head_dim)
    attention = masked_softmax(scaled_scores, valid_lens)
    output = torch.matmul(attention, V)
    return output, attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        if d_total is None:
            d_total = d_model
        assert d_model > 0 and num_heads > 0
        assert d_total % num_heads == 0, "d_total must be divisible by num_heads"
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_total = d_total
        self.head_dim = d_total // num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        # step 1: project
        q_proj = self.W_q(queries)
        k_proj = self.W_k(keys)
        v_proj = self.W_v(values)
        # step 2: split into heads
        q_heads = split_heads(q_proj, self.num_heads)
        k_heads = split_heads(k_proj, self.num_heads)
        v_heads = split_heads(v_proj, self.num_heads)
        # step 3: attention scores
        scores = torch.matmul(q_heads, k_heads.transpose(-2, -1))
        scores = scores / math.sqrt(self.head_dim)
        attention = masked_softmax(scores, valid_lens)
        self.attention_weights = attention
        # step 4: weighted sum of values
        attention_dropped = self.dropout(attention)
        head_outputs = torch.matmul(attention_dropped, v_heads)
        # step 5: put heads back together and project
        combined = concat_heads(head_outputs)
        output = self.W_o(combined)
        return output
