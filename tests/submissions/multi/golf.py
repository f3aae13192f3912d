# CODES: shape.no-valueerror, module.self-attention-only, device.hardcoded-cpu
# STYLE: code-golf one-liners (lambdas, unflatten/flatten, walrus)
import torch, torch.nn as nn
head_weight_shape = lambda d, d_total, num_heads: (d, d_total // num_heads)
project = lambda H, W: H @ W
project_heads = lambda H, W_heads: H[:, None] @ W_heads
split_heads = lambda X, num_heads: X.unflatten(-1, (num_heads, -1)).transpose(-3, -2)
concat_heads = lambda X: X.transpose(-3, -2).flatten(-2)
def masked_softmax(s, vl=None):
    if vl is None: return s.softmax(-1)
    k = torch.arange(s.shape[-1]) < (vl.view(-1, *[1] * (s.dim() - 1)) if vl.dim() == 1 else vl.view(vl.shape[0], *[1] * (s.dim() - 3), -1, 1))
    return s.masked_fill(~k, torch.finfo(s.dtype).min).softmax(-1) * k
attention_pool = lambda Q, K, V, vl=None: ((w := masked_softmax(Q @ K.transpose(-1, -2) / Q.shape[-1] ** .5, vl)) @ V, w)
class MultiHeadAttention(nn.Module):
    def __init__(s, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__(); s.h = num_heads; D = d_total or d_model
        s.W_q, s.W_k, s.W_v, s.W_o = [nn.Linear(*io, bias=bias) for io in [(d_model, D)] * 3 + [(D, d_model)]]
        s.drop = nn.Dropout(dropout); s.attention_weights = None
    def forward(s, queries, keys, values, valid_lens=None):
        q, k, v = (split_heads(W(queries), s.h) for W in (s.W_q, s.W_k, s.W_v))
        s.attention_weights = w = masked_softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** .5, valid_lens)
        return s.W_o(concat_heads(s.drop(w) @ v))
