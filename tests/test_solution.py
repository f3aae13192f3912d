"""Is the reference solution (``solutions/``) right?

Checked against two independent oracles, and by properties the SPEC implies:

* ``torch.nn.MultiheadAttention`` with the same weights copied in;
* a float64 NumPy implementation with explicit loops, written below from the SPEC's
  equations (the ``np_*`` functions: no torch in them).
"""
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from solutions import (MultiHeadAttention, attention_pool, concat_heads, head_weight_shape,
                       masked_softmax, project, project_heads, split_heads)

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


# ---------------------------------------------------------------------------------------------
# The NumPy oracle: float64, explicit loops, straight from the equations. No torch below here
# until the next rule.

def np_valid_length(valid_lens, b, i, n_k):
    """How many leading keys query row i of batch element b may attend to."""
    if valid_lens is None:
        return n_k
    length = valid_lens[b] if valid_lens.ndim == 1 else valid_lens[b, i]
    return min(int(length), n_k)


def np_softmax_prefix(row, length):
    """Softmax of row[:length]; the other entries, and a row of length 0, are 0."""
    weights = np.zeros(len(row))
    if length == 0:
        return weights
    top = max(row[k] for k in range(length))
    exps = [math.exp(row[k] - top) for k in range(length)]
    for k in range(length):
        weights[k] = exps[k] / sum(exps)
    return weights


def np_masked_softmax(scores, valid_lens):
    """scores (batch, ..., n_q, n_k); valid_lens None, (batch,) or (batch, n_q)."""
    out = np.zeros(scores.shape)
    for index in np.ndindex(*scores.shape[:-1]):
        length = np_valid_length(valid_lens, index[0], index[-1], scores.shape[-1])
        out[index] = np_softmax_prefix(scores[index], length)
    return out


def np_attention_pool(Q, K, V, valid_lens):
    """weights = masked softmax of Q Kᵀ / sqrt(p); output = weights V; over leading axes."""
    p, n_k = Q.shape[-1], K.shape[-2]
    scores = np.zeros(Q.shape[:-1] + (n_k,))
    for index in np.ndindex(*Q.shape[:-1]):
        for k in range(n_k):
            scores[index + (k,)] = sum(Q[index + (c,)] * K[index[:-1] + (k, c)] for c in range(p)) / math.sqrt(p)
    weights = np_masked_softmax(scores, valid_lens)
    output = np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for index in np.ndindex(*output.shape):
        output[index] = sum(weights[index[:-1] + (k,)] * V[index[:-2] + (k, index[-1])] for k in range(n_k))
    return output, weights


def np_split_heads(X, num_heads):
    """out[b, j, i, c] = X[b, i, j*p + c]."""
    batch, n, width = X.shape
    p = width // num_heads
    out = np.zeros((batch, num_heads, n, p))
    for b, j, i, c in np.ndindex(*out.shape):
        out[b, j, i, c] = X[b, i, j * p + c]
    return out


def np_concat_heads(X):
    """out[b, i, j*p + c] = X[b, j, i, c]."""
    batch, num_heads, n, p = X.shape
    out = np.zeros((batch, n, num_heads * p))
    for b, j, i, c in np.ndindex(*X.shape):
        out[b, i, j * p + c] = X[b, j, i, c]
    return out


def np_multi_head_attention(params, queries, keys, values, num_heads, valid_lens):
    """Head j: Q^[j] = H W_j^q + b_j^q (and K, V alike), h_j = pooled; output = [h_1|...|h_M] W_o + b_o.

    ``params`` holds W_q, W_k, W_v (d_model, d_total), W_o (d_total, d_model) in the
    row-vector form, and the biases. Returns (output, weights (batch, M, n_q, n_k)).
    """
    batch, n_q, _ = queries.shape
    n_k, d_total = keys.shape[1], params["W_q"].shape[1]
    p = d_total // num_heads
    output = np.zeros((batch, n_q, params["W_o"].shape[1]))
    weights = np.zeros((batch, num_heads, n_q, n_k))
    for b in range(batch):
        heads = np.zeros((n_q, d_total))
        for j in range(num_heads):
            block = slice(j * p, (j + 1) * p)
            Q = queries[b] @ params["W_q"][:, block] + params["b_q"][block]     # (n_q, p)
            K = keys[b] @ params["W_k"][:, block] + params["b_k"][block]        # (n_k, p)
            V = values[b] @ params["W_v"][:, block] + params["b_v"][block]      # (n_k, p)
            for i in range(n_q):
                scores = [float(Q[i] @ K[k]) / math.sqrt(p) for k in range(n_k)]
                w = np_softmax_prefix(scores, np_valid_length(valid_lens, b, i, n_k))
                weights[b, j, i] = w
                heads[i, block] = sum(w[k] * V[k] for k in range(n_k))
        output[b] = heads @ params["W_o"] + params["b_o"]
    return output, weights


# ---------------------------------------------------------------------------------------------
# Helpers and cases.

@dataclass(frozen=True)
class Case:
    """One configuration of the module and its inputs."""

    name: str
    batch: int
    n_q: int
    n_k: int
    d_model: int
    num_heads: int
    d_total: int | None = None


CASES = [Case("one-head", 2, 3, 3, 4, 1), Case("two-heads-nq-ne-nk", 2, 3, 5, 8, 2),
         Case("four-heads", 3, 4, 2, 8, 4), Case("head-dim-1", 2, 2, 3, 6, 6),
         Case("batch-1", 1, 5, 4, 6, 3)]
WIDE_CASES = CASES + [Case("d-total-wider", 2, 3, 4, 8, 3, d_total=12),
                      Case("d-total-narrower", 2, 4, 3, 6, 2, d_total=4)]


def ids(cases):
    return [case.name for case in cases]


def make(case, *, bias=False, dtype=torch.float64):
    """A model in eval mode and random queries, keys, values (keys and values differ)."""
    model = MultiHeadAttention(case.d_model, case.num_heads, d_total=case.d_total, bias=bias)
    model = model.to(dtype).eval()
    if bias:                                          # nn.Linear's default biases are small; make them count
        with torch.no_grad():
            for layer in (model.W_q, model.W_k, model.W_v, model.W_o):
                layer.bias.normal_()
    shape_q, shape_k = (case.batch, case.n_q, case.d_model), (case.batch, case.n_k, case.d_model)
    return model, torch.randn(shape_q, dtype=dtype), torch.randn(shape_k, dtype=dtype), torch.randn(shape_k, dtype=dtype)


def lengths(case, *, low=0, per_query=False):
    """Random valid lengths in [low, n_k], shape (batch,) or (batch, n_q)."""
    shape = (case.batch, case.n_q) if per_query else (case.batch,)
    return torch.randint(low, case.n_k + 1, shape)


def numpy_params(model):
    """The model's weights in the row-vector form of the SPEC, as float64 NumPy arrays."""
    def weight(layer):
        return layer.weight.detach().double().numpy().T
    def bias(layer):
        return np.zeros(layer.out_features) if layer.bias is None else layer.bias.detach().double().numpy()
    return {"W_q": weight(model.W_q), "W_k": weight(model.W_k), "W_v": weight(model.W_v),
            "W_o": weight(model.W_o), "b_q": bias(model.W_q), "b_k": bias(model.W_k),
            "b_v": bias(model.W_v), "b_o": bias(model.W_o)}


def as_numpy(tensor):
    return None if tensor is None else tensor.detach().double().numpy()


def torch_oracle(model, num_heads, queries, keys, values, valid_lens):
    """torch.nn.MultiheadAttention with the model's weights copied in: (output, weights)."""
    bias = model.W_q.bias is not None
    oracle = nn.MultiheadAttention(model.W_o.out_features, num_heads, bias=bias, batch_first=True,
                                   dtype=queries.dtype).eval()
    with torch.no_grad():                             # nn.Linear and in_proj_weight are both (out, in)
        oracle.in_proj_weight.copy_(torch.cat([model.W_q.weight, model.W_k.weight, model.W_v.weight]))
        oracle.out_proj.weight.copy_(model.W_o.weight)
        if bias:
            oracle.in_proj_bias.copy_(torch.cat([model.W_q.bias, model.W_k.bias, model.W_v.bias]))
            oracle.out_proj.bias.copy_(model.W_o.bias)
    padded = None if valid_lens is None else torch.arange(keys.shape[1]) >= valid_lens[:, None]  # True: ignore
    with torch.no_grad():
        return oracle(queries, keys, values, key_padding_mask=padded, need_weights=True,
                      average_attn_weights=False)


def close(actual, expected, tol):
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# Oracle 1: torch.nn.MultiheadAttention.

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_module_matches_torch_multihead_attention(case, bias, masked, dtype):
    """Does the module give torch.nn.MultiheadAttention's output and per-head weights, given the same weights?"""
    model, queries, keys, values = make(case, bias=bias, dtype=dtype)
    valid_lens = lengths(case, low=1) if masked else None      # torch gives NaN for rows with no key
    with torch.no_grad():
        output = model(queries, keys, values, valid_lens)
    expected_output, expected_weights = torch_oracle(model, case.num_heads, queries, keys, values, valid_lens)
    close(output, expected_output, TOLERANCE[dtype])
    close(model.attention_weights, expected_weights, TOLERANCE[dtype])


# ---------------------------------------------------------------------------------------------
# Oracle 2: the NumPy loops.

@pytest.mark.parametrize("valid", ["none", "per-batch", "per-query"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("case", WIDE_CASES, ids=ids(WIDE_CASES))
def test_module_matches_numpy_loops(case, bias, valid):
    """Does the module match the explicit-loop equations, for any d_total and valid lengths (0 included)?"""
    model, queries, keys, values = make(case, bias=bias)
    valid_lens = None if valid == "none" else lengths(case, per_query=valid == "per-query")
    with torch.no_grad():
        output = model(queries, keys, values, valid_lens)
    expected_output, expected_weights = np_multi_head_attention(
        numpy_params(model), as_numpy(queries), as_numpy(keys), as_numpy(values), case.num_heads,
        as_numpy(valid_lens))
    np.testing.assert_allclose(as_numpy(output), expected_output, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(as_numpy(model.attention_weights), expected_weights, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("d, d_total, num_heads", [(8, 8, 1), (8, 8, 2), (8, 8, 8), (6, 12, 3), (512, 512, 8)])
def test_head_weight_shape_is_d_by_d_total_over_heads(d, d_total, num_heads):
    """Is one head's matrix d × d_total/M?"""
    assert head_weight_shape(d, d_total, num_heads) == (d, d_total // num_heads)


@pytest.mark.parametrize("shape_H, shape_W", [((3, 2), (2, 4)), ((2, 5, 3), (3, 1)), ((2, 3, 4, 5), (5, 2))])
def test_project_matches_numpy(shape_H, shape_W):
    """Does project compute H W over any leading axes?"""
    H, W = torch.randn(shape_H, dtype=torch.float64), torch.randn(shape_W, dtype=torch.float64)
    np.testing.assert_allclose(as_numpy(project(H, W)), as_numpy(H) @ as_numpy(W), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch, n, d, num_heads, p", [(2, 3, 4, 1, 5), (1, 4, 3, 3, 2), (3, 2, 5, 4, 1)])
def test_project_heads_uses_each_heads_matrix(batch, n, d, num_heads, p):
    """Is out[:, j] = H @ W_heads[j] for every head j?"""
    H, W_heads = torch.randn(batch, n, d, dtype=torch.float64), torch.randn(num_heads, d, p, dtype=torch.float64)
    out = as_numpy(project_heads(H, W_heads))
    assert out.shape == (batch, num_heads, n, p)
    for j in range(num_heads):
        np.testing.assert_allclose(out[:, j], as_numpy(H) @ as_numpy(W_heads[j]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape, num_heads", [((2, 3, 8), 2), ((1, 5, 6), 3), ((2, 1, 4), 4), ((3, 4, 5), 1)])
def test_split_and_concat_match_numpy(shape, num_heads):
    """Do split_heads and concat_heads move head j's block [j*p, (j+1)*p) as the loops say?"""
    X = torch.randn(shape, dtype=torch.float64)
    heads = split_heads(X, num_heads)
    np.testing.assert_array_equal(as_numpy(heads), np_split_heads(as_numpy(X), num_heads))
    np.testing.assert_array_equal(as_numpy(concat_heads(heads)), np_concat_heads(as_numpy(heads)))


@pytest.mark.parametrize("scores_shape, lens_shape", [
    ((2, 3, 4), None), ((2, 3, 4), (2,)), ((2, 3, 4), (2, 3)), ((2, 2, 3, 4), (2,)),
    ((2, 2, 3, 4), (2, 3)), ((2, 2, 2, 3, 4), (2, 3)), ((1, 1, 1), (1,))])
def test_masked_softmax_matches_numpy(scores_shape, lens_shape):
    """Does masked_softmax follow the valid-length rules, broadcasting over the head axes?"""
    scores = 3 * torch.randn(scores_shape, dtype=torch.float64)
    valid_lens = None if lens_shape is None else torch.randint(0, scores_shape[-1] + 1, lens_shape)
    np.testing.assert_allclose(as_numpy(masked_softmax(scores, valid_lens)),
                               np_masked_softmax(as_numpy(scores), as_numpy(valid_lens)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lead, n_q, n_k, p, p_v, lens_shape", [
    ((2,), 3, 4, 5, 2, None), ((2,), 3, 4, 5, 2, (2,)), ((2, 3), 2, 5, 4, 3, (2,)), ((2, 3), 2, 5, 4, 3, (2, 2)),
    ((1,), 1, 1, 1, 1, (1,))])
def test_attention_pool_matches_numpy(lead, n_q, n_k, p, p_v, lens_shape):
    """Does attention_pool scale by sqrt(p), mask, and return (weights V, weights)?"""
    Q, K = torch.randn(*lead, n_q, p, dtype=torch.float64), torch.randn(*lead, n_k, p, dtype=torch.float64)
    V = torch.randn(*lead, n_k, p_v, dtype=torch.float64)
    valid_lens = None if lens_shape is None else torch.randint(0, n_k + 1, lens_shape)
    output, weights = attention_pool(Q, K, V, valid_lens)
    expected_output, expected_weights = np_attention_pool(as_numpy(Q), as_numpy(K), as_numpy(V), as_numpy(valid_lens))
    np.testing.assert_allclose(as_numpy(weights), expected_weights, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(as_numpy(output), expected_output, rtol=1e-12, atol=1e-12)


def test_parts_accept_non_contiguous_inputs():
    """Do the parts give the same values for non-contiguous views as for contiguous copies?"""
    X = torch.randn(6, 3, 2, dtype=torch.float64).transpose(0, 2)                  # (2, 3, 6), strided
    assert not X.is_contiguous()
    assert torch.equal(split_heads(X, 3), split_heads(X.contiguous(), 3))
    heads = torch.randn(2, 3, 4, 5, dtype=torch.float64)[:, :, :, ::2]             # (2, 3, 4, 3), strided
    assert torch.equal(concat_heads(heads), concat_heads(heads.contiguous()))
    scores, valid_lens = torch.randn(4, 3, 2, dtype=torch.float64).transpose(0, 2), torch.tensor([1, 3])
    assert torch.equal(masked_softmax(scores, valid_lens), masked_softmax(scores.contiguous(), valid_lens))


# ---------------------------------------------------------------------------------------------
# Properties.

@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 6, 12])
def test_concat_undoes_split(num_heads):
    """Is concat_heads(split_heads(X, h)) exactly X?"""
    X = torch.randn(2, 5, 12, dtype=torch.float64)
    assert torch.equal(concat_heads(split_heads(X, num_heads)), X)


def heads_before_out_projection(model, *inputs):
    """The model's output and the input of W_o (the concatenated heads) in one call."""
    seen = []
    handle = model.W_o.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    with torch.no_grad():
        output = model(*inputs)
    handle.remove()
    return output, seen[0]


@pytest.mark.parametrize("j", [0, 2])
def test_head_depends_only_on_its_own_block(j):
    """Does perturbing block j of W_q, W_k, W_v change head j only (others' weights and outputs unchanged)?"""
    case = Case("three-heads", 2, 3, 4, 6, 3)
    model, queries, keys, values = make(case, bias=True)
    inputs = (queries, keys, values, lengths(case, low=1))
    _, heads = heads_before_out_projection(model, *inputs)
    weights = model.attention_weights
    p = 2
    with torch.no_grad():
        for layer in (model.W_q, model.W_k, model.W_v):
            layer.weight[j * p:(j + 1) * p] += torch.randn(p, case.d_model, dtype=torch.float64)
            layer.bias[j * p:(j + 1) * p] += torch.randn(p, dtype=torch.float64)
    _, new_heads = heads_before_out_projection(model, *inputs)
    others = [i for i in range(case.num_heads) if i != j]
    close(model.attention_weights[:, others], weights[:, others], 1e-12)
    close(new_heads.view(2, 3, 3, p)[:, :, others], heads.view(2, 3, 3, p)[:, :, others], 1e-12)
    assert (model.attention_weights[:, j] - weights[:, j]).abs().max() > 1e-3


def test_permuting_head_blocks_leaves_output_unchanged():
    """Does reordering the heads (W_q, W_k, W_v rows, W_o input columns alike) leave the output unchanged?"""
    case = Case("four-heads", 2, 3, 5, 8, 4)
    model, queries, keys, values = make(case, bias=True)
    valid_lens = lengths(case, per_query=True)
    with torch.no_grad():
        output = model(queries, keys, values, valid_lens)
    weights, perm, p = model.attention_weights, [2, 0, 3, 1], 2
    with torch.no_grad():
        for layer in (model.W_q, model.W_k, model.W_v):
            layer.weight.copy_(layer.weight.view(4, p, 8)[perm].reshape(8, 8))      # head j := old head perm[j]
            layer.bias.copy_(layer.bias.view(4, p)[perm].reshape(8))
        model.W_o.weight.copy_(model.W_o.weight.view(8, 4, p)[:, perm].reshape(8, 8))
        permuted = model(queries, keys, values, valid_lens)
    close(permuted, output, 1e-12)
    close(model.attention_weights, weights[:, perm], 1e-12)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_masked_keys_get_exactly_zero_weight(dtype):
    """Do masked keys get weight exactly 0, and rows of valid length 0 zero weights, never NaN, in every dtype?"""
    scores = (10 * torch.randn(3, 2, 4, 5)).to(dtype)                           # (batch, heads, n_q, n_k)
    valid_lens = torch.tensor([0, 2, 5])
    weights = masked_softmax(scores, valid_lens)
    assert weights.dtype == dtype and torch.isfinite(weights).all()
    assert torch.equal(weights[0], torch.zeros_like(weights[0]))
    assert torch.equal(weights[1, ..., 2:], torch.zeros_like(weights[1, ..., 2:]))
    sums = weights[1:].float().sum(-1)
    close(sums, torch.ones_like(sums), 1e-2)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_valid_length_zero_gives_zero_output(dtype):
    """Does a query row of valid length 0 get zero weights and a zero output (pool and module), in every dtype?"""
    case = Case("two-heads", 2, 3, 4, 8, 2)
    model, queries, keys, values = make(case, dtype=dtype)
    valid_lens = torch.tensor([[0, 2, 0], [4, 0, 1]])                            # (batch, n_q)
    with torch.no_grad():
        output = model(queries, keys, values, valid_lens)
    zero_rows = valid_lens == 0                                                   # (batch, n_q)
    assert output.dtype == dtype and torch.isfinite(output).all()
    assert torch.equal(output[zero_rows], torch.zeros_like(output[zero_rows]))   # bias=False: W_o(0) = 0
    weights = model.attention_weights.transpose(1, 2)                             # (batch, n_q, heads, n_k)
    assert torch.equal(weights[zero_rows], torch.zeros_like(weights[zero_rows]))
    pooled, pool_weights = attention_pool(queries, keys, values, valid_lens)
    assert torch.equal(pooled[zero_rows], torch.zeros_like(pooled[zero_rows]))
    assert torch.isfinite(pool_weights).all()


def test_valid_length_zero_under_float16_autocast():
    """Under torch.autocast('cpu', float16), are masked weights 0 and rows of valid length 0 zero and finite?"""
    case = Case("two-heads", 2, 3, 4, 8, 2)
    model, queries, keys, values = make(case, dtype=torch.float32)
    valid_lens = torch.tensor([0, 2])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        output = model(100 * queries, 100 * keys, values, valid_lens)            # large scores: fp16 range
    assert torch.isfinite(output).all()
    assert torch.equal(output[0], torch.zeros_like(output[0]))
    assert torch.equal(model.attention_weights[0], torch.zeros_like(model.attention_weights[0]))
    assert (model.attention_weights[1, ..., 2:] == 0).all()


def test_bias_is_the_output_of_a_row_with_no_keys():
    """With bias, is the output of a row of valid length 0 exactly W_o's bias (the heads are zero)?"""
    case = Case("two-heads", 2, 3, 4, 8, 2)
    model, queries, keys, values = make(case, bias=True)
    with torch.no_grad():
        output = model(queries, keys, values, torch.tensor([0, 3]))
    close(output[0], model.W_o.bias.expand(3, 8), 0.0)


def test_inputs_are_not_modified():
    """Do the functions and the module leave every input (valid_lens included) unchanged?"""
    case = Case("two-heads", 2, 3, 4, 8, 2)
    model, queries, keys, values = make(case, bias=True)
    valid_lens, X = lengths(case, per_query=True), torch.randn(2, 3, 8, dtype=torch.float64)
    scores, W_heads = torch.randn(2, 2, 3, 4, dtype=torch.float64), torch.randn(2, 8, 4, dtype=torch.float64)
    calls = [(project, (X, W_heads[0])), (project_heads, (X, W_heads)), (split_heads, (X, 2)),
             (concat_heads, (scores,)), (masked_softmax, (scores, valid_lens)),
             (attention_pool, (scores, scores, scores, valid_lens)), (model, (queries, keys, values, valid_lens))]
    for fn, args in calls:
        before = [arg.clone() if isinstance(arg, torch.Tensor) else arg for arg in args]
        fn(*args)
        for arg, copy in zip(args, before):
            assert not isinstance(arg, torch.Tensor) or torch.equal(arg, copy), f"{fn} modified an input"


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dtype_and_device_are_kept(dtype):
    """Does every function, and the module, return tensors in the inputs' dtype and on their device?"""
    X = torch.randn(2, 3, 8).to(dtype)
    outputs = [project(X, torch.randn(8, 4).to(dtype)), project_heads(X, torch.randn(2, 8, 4).to(dtype)),
               split_heads(X, 2), concat_heads(split_heads(X, 2)), masked_softmax(X, torch.tensor([1, 0])),
               *attention_pool(X, X, X, torch.tensor([[1, 2, 3], [0, 8, 2]]))]
    model = MultiHeadAttention(8, 2).to(dtype)
    outputs += [model(X, X, X, torch.tensor([3, 1])), model.attention_weights]
    for output in outputs:
        assert (output.dtype, output.device) == (dtype, X.device)


def test_gradients_reach_every_parameter():
    """Does a backward pass give every parameter (weights and biases) a nonzero gradient?"""
    case = Case("two-heads", 2, 3, 4, 8, 2)
    model, queries, keys, values = make(case, bias=True)
    output = model(queries, keys, values, lengths(case, low=1))
    (output * torch.randn_like(output)).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().max() > 0, name


def test_parameters_have_the_contract_names_shapes_and_count():
    """Are W_q, W_k, W_v, W_o Linear layers of the SPEC's shapes, 4·d·d_total parameters whatever M is?"""
    for num_heads in (1, 2, 3, 6):
        model = MultiHeadAttention(8, num_heads, d_total=12)
        shapes = {name: tuple(getattr(model, name).weight.shape) for name in ("W_q", "W_k", "W_v", "W_o")}
        assert shapes == {"W_q": (12, 8), "W_k": (12, 8), "W_v": (12, 8), "W_o": (8, 12)}
        assert all(isinstance(getattr(model, name), nn.Linear) for name in shapes)
        assert sum(p.numel() for p in model.parameters()) == 4 * 8 * 12


def test_heads_start_different():
    """Do a fresh model's head blocks of W_q, W_k and W_v all differ from each other?"""
    model = MultiHeadAttention(8, 4)
    for layer in (model.W_q, model.W_k, model.W_v):
        blocks = layer.weight.view(4, 2, 8)
        assert all(not torch.equal(blocks[i], blocks[j]) for i in range(4) for j in range(i + 1, 4))
    assert model.W_q.weight.data_ptr() != model.W_k.weight.data_ptr() != model.W_v.weight.data_ptr()


def test_dropout_acts_in_training_mode_only():
    """Is a model with dropout in eval mode the same as one without, and random in training mode?"""
    case = Case("two-heads", 2, 3, 4, 8, 2)
    model, queries, keys, values = make(case)
    dropped = MultiHeadAttention(8, 2, dropout=0.5).double()
    dropped.load_state_dict(model.state_dict())
    with torch.no_grad():
        expected = model(queries, keys, values)
        close(dropped.eval()(queries, keys, values), expected, 0.0)
        assert not torch.allclose(dropped.train()(queries, keys, values), expected)


# ---------------------------------------------------------------------------------------------
# Metamorphic relations.

@pytest.mark.parametrize("per_query", [False, True], ids=["per-batch", "per-query"])
def test_batch_equals_loop_over_samples(per_query):
    """Is the output for a batch the output for each sample on its own, stacked?"""
    case = Case("batch-4", 4, 3, 5, 6, 3)
    model, queries, keys, values = make(case, bias=True)
    valid_lens = lengths(case, per_query=per_query)
    with torch.no_grad():
        output = model(queries, keys, values, valid_lens)
        weights = model.attention_weights
        for b in range(case.batch):
            one = model(queries[b:b + 1], keys[b:b + 1], values[b:b + 1], valid_lens[b:b + 1])
            close(one[0], output[b], 1e-12)
            close(model.attention_weights[0], weights[b], 1e-12)


def single_head_attention(queries, keys, values, valid_lens, W_q, W_k, W_v, W_o):
    """Plain one-head attention: W_o(softmax(Q Kᵀ / sqrt(d_total), masked) V), valid lengths >= 1."""
    Q, K, V = W_q(queries), W_k(keys), W_v(values)
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    padded = torch.arange(K.shape[1]) >= valid_lens[:, None, None]               # (batch, 1, n_k)
    return W_o(torch.softmax(scores.masked_fill(padded, -math.inf), dim=-1) @ V)


def test_one_head_equals_single_head_attention():
    """Is MultiHeadAttention with num_heads=1 plain single-head attention of width d_total?"""
    case = Case("one-head-wide", 2, 3, 5, 6, 1, d_total=10)
    model, queries, keys, values = make(case, bias=True)
    valid_lens = lengths(case, low=1)
    with torch.no_grad():
        close(model(queries, keys, values, valid_lens),
              single_head_attention(queries, keys, values, valid_lens, model.W_q, model.W_k, model.W_v, model.W_o),
              1e-12)


# ---------------------------------------------------------------------------------------------
# Errors.

@pytest.mark.parametrize("args", [(8, 8, 3), (8, 6, 4), (12, 10, 4)])
def test_head_weight_shape_rejects_indivisible_head_counts(args):
    """Does head_weight_shape raise ValueError, naming divisibility, when M does not divide d_total?"""
    with pytest.raises(ValueError, match="divisible"):
        head_weight_shape(*args)


@pytest.mark.parametrize("args, name", [((8, 8, 0), "num_heads"), ((0, 8, 2), "d"), ((8, 0, 2), "d_total"),
                                        ((8, 8, -2), "num_heads"), ((8, 8, True), "num_heads"),
                                        ((8, 8, 2.0), "num_heads")])
def test_head_weight_shape_rejects_non_positive_sizes(args, name):
    """Does head_weight_shape raise ValueError, naming the argument, for sizes that are not positive integers?"""
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        head_weight_shape(*args)


@pytest.mark.parametrize("num_heads, match", [(3, "divisible"), (5, "divisible"), (0, "num_heads"), (-1, "num_heads")])
def test_split_heads_rejects_impossible_head_counts(num_heads, match):
    """Does split_heads raise a ValueError that says why, when the last axis cannot be split into num_heads?"""
    with pytest.raises(ValueError, match=match):
        split_heads(torch.zeros(2, 3, 8), num_heads)


@pytest.mark.parametrize("args, kwargs, match", [((8, 3), {}, "divisible"), ((8, 0), {}, "num_heads"),
                                                 ((8, 4), {"d_total": 6}, "divisible"),
                                                 ((8, 2), {"d_total": 0}, "d_total")])
def test_module_rejects_impossible_head_counts(args, kwargs, match):
    """Does MultiHeadAttention raise a ValueError that says why, when d_total cannot be split into num_heads?"""
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# CUDA.

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_module_on_cuda_matches_cpu(dtype):
    """On CUDA, does the module keep device and dtype, match the CPU, and stay finite under fp16 autocast?"""
    case = Case("two-heads-nq-ne-nk", 2, 3, 5, 8, 2)
    model, queries, keys, values = make(case, bias=True, dtype=dtype)
    valid_lens = torch.tensor([0, 3])
    with torch.no_grad():
        expected = model(queries, keys, values, valid_lens)
        model.cuda()
        output = model(queries.cuda(), keys.cuda(), values.cuda(), valid_lens.cuda())
        assert (output.device.type, output.dtype) == ("cuda", dtype)
        close(output.cpu(), expected, TOLERANCE[dtype])
        with torch.autocast("cuda", dtype=torch.float16):
            output = model(queries.cuda(), keys.cuda(), values.cuda(), valid_lens.cuda())
        assert torch.isfinite(output).all()
        assert (model.attention_weights[0] == 0).all()
