# ATTACK: answers with data built to exhaust or crash the grader's reader: a 40 MiB tensor, a 100 MiB tensor (over the frame limit), a tuple nested 5000 deep, a dict, a generator, a tensor whose storage is shared with a huge one, and a module whose attention_weights is a 60 MiB tensor.
# HONEST: 0
# EXPECT: frames over the size limit are refused in the sandbox ("could not be sent back") or by the grader, deep nesting is refused, odd types are rejected before the grader looks at them; the grader's memory stays bounded; score 0; grader exit status 0.
import torch

_BIG = torch.zeros(5 << 20, dtype=torch.float64)          # 40 MiB


def head_weight_shape(d, d_total, num_heads):
    nested = (d,)
    for _ in range(5000):
        nested = (nested,)
    return nested


def project(H, W):
    return _BIG


def project_heads(H, W_heads):
    return torch.zeros(100 << 17, dtype=torch.float64)      # 100 MiB


def split_heads(X, num_heads):
    return {"value": X}


def concat_heads(X):
    return (x for x in range(3))


def masked_softmax(scores, valid_lens=None):
    return torch.zeros(1 << 24)[:scores.numel()].reshape(scores.shape)


def attention_pool(Q, K, V, valid_lens=None):
    return _BIG, _BIG


class MultiHeadAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()

    def forward(self, queries, keys, values, valid_lens=None):
        self.attention_weights = torch.zeros(60 << 17, dtype=torch.float64)
        return _BIG
