# ATTACK: answers with meta tensors of exactly the right shapes and dtypes (a shape, no values): every function returns torch.empty(<the SPEC's shape>, device="meta"), attention_pool a pair of them, and the module's forward returns a meta output with meta attention_weights, so a grader that checks shapes and dtypes and then compares values calls bool() on a meta tensor (RuntimeError: Tensor.item() cannot be called on meta tensors).
# HONEST: 0
# EXPECT: a tensor without values is no answer: an error naming "on the meta device" and asking for a CPU tensor; nothing compares it; score 0; grader exit status 0, valid JSON.
import torch


def _meta(*shape, like=None):
    return torch.empty(*shape, dtype=like.dtype if like is not None else torch.float64,
                       device="meta")


def head_weight_shape(d, d_total, num_heads):
    if num_heads < 1 or d < 1 or d_total % num_heads:
        raise ValueError("impossible head count")
    return (d, torch.empty((), dtype=torch.int64, device="meta"))


def project(H, W):
    return _meta(*H.shape[:-1], W.shape[-1], like=H)


def project_heads(H, W_heads):
    return _meta(H.shape[0], W_heads.shape[0], H.shape[1], W_heads.shape[-1], like=H)


def split_heads(X, num_heads):
    b, n, d = X.shape
    if d % num_heads:
        raise ValueError("width not divisible by num_heads")
    return _meta(b, num_heads, n, d // num_heads, like=X)


def concat_heads(X):
    b, h, n, p = X.shape
    return _meta(b, n, h * p, like=X)


def masked_softmax(scores, valid_lens=None):
    return _meta(*scores.shape, like=scores)


def attention_pool(Q, K, V, valid_lens=None):
    return (_meta(*Q.shape[:-1], V.shape[-1], like=Q), _meta(*Q.shape[:-1], K.shape[-2], like=Q))


class MultiHeadAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model           # d_total ignored, one parameter too many, no ValueError:
        self.num_heads = num_heads  # the module's own checks earn nothing, while loads and
        self.W_q = torch.nn.Linear(d_model, d_total, bias=bias)     # forwards still run
        self.W_k = torch.nn.Linear(d_model, d_total, bias=bias)
        self.W_v = torch.nn.Linear(d_model, d_total, bias=bias)
        self.W_o = torch.nn.Linear(d_total, d_model, bias=bias)
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        b, n_q, _ = queries.shape
        self.attention_weights = _meta(b, self.num_heads, n_q, keys.shape[1], like=queries)
        return _meta(*queries.shape, like=queries)
