"""The public checks: small, fixed examples of every graded function, checkable by hand.

This file is the one source of the public tests. There is one ``check_<api>_<aspect>``
per public check of the autograder (``<api>.<aspect>``, ``hidden=False``), testing on fixed
examples what that check tests, so that each is worth that check's rubric points.
``python -m assignments.build`` copies the checks of ``<api>`` into the notebook's test cell
after the graded cell ``<api>``, and the helpers above them into the notebook's helper
cell; it also writes ``assignments/stub/test_public.py``: this file plus one pytest test
per check.

A check takes the function under test as its parameter, named after it, and
:func:`run_check` fills it in by name from the student's namespace (the notebook's
``globals()`` or the module ``mha``). Every failure raises ``AssertionError`` with a
message that names the call, and says what was expected and what came back.
"""
import inspect
import math

import torch
from torch import nn


def run_check(check, api):
    """Run ``check``, taking the functions it tests by name from ``api`` (a dict, e.g. globals())."""
    __tracebackhide__ = True
    params = list(inspect.signature(check).parameters)
    name = params[0]
    missing = [param for param in params if param not in api]
    if missing:
        raise AssertionError(f"{name} is missing: define {', '.join(missing)} with exactly that name")
    try:
        check(*(api[param] for param in params))
    except AssertionError:
        raise
    except NotImplementedError as error:
        raise AssertionError(not_implemented_message(name, api[name], error)) from None
    except Exception as error:
        raise AssertionError(f"{name} raised {type(error).__name__} on a public example: {error}") from error
    print(f"{check.__name__}: the public tests pass.")


def run_checks(checks, api):
    """Run every check of ``checks`` (see :func:`run_check`); one AssertionError says what failed."""
    __tracebackhide__ = True
    failures = []
    for check in checks:
        try:
            run_check(check, api)
        except AssertionError as error:
            if str(error) not in failures:
                failures.append(str(error))
    if failures:
        raise AssertionError("\n".join(failures))


def not_implemented_message(name, obj, error):
    """Say whether ``name`` itself or something it calls is still a stub."""
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    functions = [v for v in vars(obj).values() if inspect.isfunction(v)] if inspect.isclass(obj) else [obj]
    detail = str(error) or "replace `raise NotImplementedError()` with your code"
    if tb.tb_frame.f_code in {getattr(f, "__code__", None) for f in functions}:
        return f"{name} is not implemented yet: {detail}"
    return f"{name} calls {tb.tb_frame.f_code.co_name}, which is not implemented yet: {detail}"


def show(value):
    """A short, readable form of a value for failure messages."""
    if isinstance(value, torch.Tensor):
        if value.numel() > 32:
            return f"a tensor of shape {tuple(value.shape)}"
        return str(_rounded(value.detach().cpu().double().tolist()))
    return repr(value)


def _rounded(values):
    return [_rounded(v) for v in values] if isinstance(values, list) else round(values, 4)


def expect_equal(what, *, actual, expected):
    """``actual == expected`` for plain values such as shapes."""
    __tracebackhide__ = True
    try:
        same = bool(actual == expected)
    except Exception:                          # e.g. a tensor of several elements
        same = False
    if not same:
        raise AssertionError(f"{what}: expected {expected!r}, got {show(actual)}")


def expect_instance(what, *, actual, expected):
    """``actual`` is an instance of the class ``expected``."""
    __tracebackhide__ = True
    if not isinstance(actual, expected):
        raise AssertionError(f"{what}: expected a {expected.__name__}, got {type(actual).__name__}")


def expect_shape(what, *, actual, expected):
    """``actual`` is a tensor of shape ``expected``."""
    __tracebackhide__ = True
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor of shape {expected}, got {show(actual)}")
    if tuple(actual.shape) != tuple(expected):
        raise AssertionError(f"{what}: expected shape {tuple(expected)}, got shape {tuple(actual.shape)}")


def expect_tensor(what, *, actual, expected, hint=""):
    """``actual`` has the shape and dtype of ``expected`` and its values (to 1e-6)."""
    __tracebackhide__ = True
    expect_shape(what, actual=actual, expected=tuple(expected.shape))
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{what}: expected dtype {expected.dtype} (the inputs' dtype), got {actual.dtype}")
    if not torch.allclose(actual, expected, rtol=0.0, atol=1e-6):
        hint = f"\n  hint: {hint}" if hint else ""
        raise AssertionError(f"{what}: wrong values\n  expected {show(expected)}\n  got      {show(actual)}{hint}")


def expect_raises(what, error, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` raises ``error``."""
    __tracebackhide__ = True
    try:
        result = fn(*args, **kwargs)
    except error:
        return
    except NotImplementedError:
        raise
    except Exception as other:
        raise AssertionError(
            f"{what}: expected {error.__name__}, got {type(other).__name__}: {other}") from None
    raise AssertionError(f"{what}: expected {error.__name__}, but it returned {show(result)}")


def expect_pair(what, result):
    """``result`` is a pair, as ``attention_pool`` returns; gives it back."""
    __tracebackhide__ = True
    if not (isinstance(result, tuple) and len(result) == 2):
        raise AssertionError(f"{what}: expected a pair (output, weights), got {show(result)}")
    return result


def tensor(values):
    """A float64 tensor of hand-written values."""
    return torch.tensor(values, dtype=torch.float64)


def set_weights(model, seed=None):
    """Set the four projections' weights to the identity, or (with ``seed``) to fixed random values."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in (model.W_q, model.W_k, model.W_v, model.W_o):
            layer.weight.copy_(torch.eye(*layer.weight.shape, dtype=layer.weight.dtype) if seed is None else
                               torch.randn(layer.weight.shape, dtype=layer.weight.dtype, generator=generator))
    return model


def check_head_weight_shape_values(head_weight_shape):
    """Does head_weight_shape give (d, d_total // num_heads)?"""
    for d, d_total, num_heads, expected in [(8, 8, 2, (8, 4)), (6, 12, 3, (6, 4)),
                                            (5, 5, 1, (5, 5)), (4, 4, 4, (4, 1))]:
        expect_equal(f"head_weight_shape(d={d}, d_total={d_total}, num_heads={num_heads})",
                     actual=head_weight_shape(d, d_total, num_heads), expected=expected)


def check_head_weight_shape_raises(head_weight_shape):
    """Does head_weight_shape raise ValueError for impossible head counts?"""
    head_weight_shape(8, 8, 2)                              # a possible one returns
    for d, d_total, num_heads in [(8, 8, 3), (8, 6, 4), (8, 8, 0)]:
        expect_raises(f"head_weight_shape(d={d}, d_total={d_total}, num_heads={num_heads})",
                      ValueError, head_weight_shape, d, d_total, num_heads)


def check_project_values(project):
    """Does project compute H @ W for one matrix and for a batch of them?"""
    H = tensor([[1, 2], [3, 4], [5, 6]])                    # (3, 2)
    W = tensor([[1, 0, 2], [0, 1, -1]])                     # (2, 3)
    HW = tensor([[1, 2, 0], [3, 4, 2], [5, 6, 4]])          # (3, 3)
    expect_tensor("project(H (3, 2), W (2, 3))", actual=project(H, W), expected=HW)
    expect_tensor("project(H (2, 3, 2), W (2, 3)) with H = [H, 2H]",
                  actual=project(torch.stack([H, 2 * H]), W), expected=torch.stack([HW, 2 * HW]))


def check_project_heads_values(project_heads):
    """Does project_heads give (batch, num_heads, n, p), head j using W_heads[j] only?"""
    H = tensor([[[1, 2], [3, 4]]])                          # (1, 2, 2)
    W_heads = tensor([[[1], [0]], [[0], [1]]])              # (2, 2, 1): head 0 reads feature 0, head 1 feature 1
    expect_tensor("project_heads(H (1, 2, 2), W_heads (2, 2, 1))", actual=project_heads(H, W_heads),
                  expected=tensor([[[[1], [3]], [[2], [4]]]]),
                  hint="out[:, j] = H @ W_heads[j]: head 0 sees feature 0 of both positions")
    expect_shape("project_heads(H (3, 4, 5), W_heads (2, 5, 6))",
                 actual=project_heads(torch.ones(3, 4, 5, dtype=torch.float64),
                                      torch.ones(2, 5, 6, dtype=torch.float64)),
                 expected=(3, 2, 4, 6))


def check_split_heads_values(split_heads):
    """Does split_heads give head j the columns [j*p, (j+1)*p) in the (batch, num_heads, n, p) layout?"""
    X = torch.arange(8, dtype=torch.float64).reshape(1, 2, 4)   # [[[0, 1, 2, 3], [4, 5, 6, 7]]]
    expect_tensor("split_heads(X = [[[0, 1, 2, 3], [4, 5, 6, 7]]], num_heads=2)",
                  actual=split_heads(X, 2), expected=tensor([[[[0, 1], [4, 5]], [[2, 3], [6, 7]]]]),
                  hint="reshape to (batch, n, num_heads, p), then swap axes 1 and 2")
    expect_shape("split_heads(X (2, 3, 12), num_heads=4)",
                 actual=split_heads(torch.zeros(2, 3, 12, dtype=torch.float64), 4), expected=(2, 4, 3, 3))


def check_split_heads_raises(split_heads):
    """Does split_heads raise ValueError when num_heads does not divide the width?"""
    X = torch.arange(8, dtype=torch.float64).reshape(1, 2, 4)
    split_heads(X, 2)                                       # a divisible width returns
    expect_raises("split_heads(X (1, 2, 4), num_heads=3)", ValueError, split_heads, X, 3)


def check_concat_heads_values(concat_heads):
    """Does concat_heads put head j back into columns [j*p, (j+1)*p), undoing split_heads?"""
    heads = tensor([[[[0, 1], [4, 5]], [[2, 3], [6, 7]]]])      # split_heads of [[[0, 1, 2, 3], [4, 5, 6, 7]]]
    expect_tensor("concat_heads(heads = [[[[0, 1], [4, 5]], [[2, 3], [6, 7]]]])",
                  actual=concat_heads(heads), expected=tensor([[[0, 1, 2, 3], [4, 5, 6, 7]]]),
                  hint="swap axes 1 and 2 back, then reshape to (batch, n, num_heads * p)")
    expect_shape("concat_heads(X (2, 4, 3, 3))",
                 actual=concat_heads(torch.zeros(2, 4, 3, 3, dtype=torch.float64)), expected=(2, 3, 12))


def check_masked_softmax_values(masked_softmax):
    """Does masked_softmax without valid_lens give the softmax over the last (key) axis?"""
    expect_tensor("masked_softmax(scores = [[[0, ln 3]]])",
                  actual=masked_softmax(tensor([[[0, math.log(3)]]])), expected=tensor([[[0.25, 0.75]]]))
    expect_tensor("masked_softmax(scores = [[[0, ln 3], [ln 3, 0]]])",
                  actual=masked_softmax(tensor([[[0, math.log(3)], [math.log(3), 0]]])),
                  expected=tensor([[[0.25, 0.75], [0.75, 0.25]]]), hint="each row sums to 1: softmax over the last axis")


def check_masked_softmax_masked(masked_softmax):
    """Does masked_softmax give masked keys weight 0 and rows of valid length 0 all zeros?"""
    expect_tensor("masked_softmax(zeros (2, 1, 4), valid_lens = [2, 4])",
                  actual=masked_softmax(torch.zeros(2, 1, 4, dtype=torch.float64), torch.tensor([2, 4])),
                  expected=tensor([[[0.5, 0.5, 0, 0]], [[0.25, 0.25, 0.25, 0.25]]]))
    expect_tensor("masked_softmax(zeros (1, 1, 3), valid_lens = [0])",
                  actual=masked_softmax(torch.zeros(1, 1, 3, dtype=torch.float64), torch.tensor([0])),
                  expected=tensor([[[0, 0, 0]]]),
                  hint="a row with valid length 0 is all zeros: not uniform, not NaN")
    expect_tensor("masked_softmax(zeros (1, 2, 3), valid_lens = [[1, 3]]) (one length per query row)",
                  actual=masked_softmax(torch.zeros(1, 2, 3, dtype=torch.float64), torch.tensor([[1, 3]])),
                  expected=tensor([[[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]]]))
    expect_tensor("masked_softmax(zeros (2, 2, 1, 2) (batch, heads, n_q, n_k), valid_lens = [1, 2])",
                  actual=masked_softmax(torch.zeros(2, 2, 1, 2, dtype=torch.float64), torch.tensor([1, 2])),
                  expected=tensor([[[[1, 0]], [[1, 0]]], [[[0.5, 0.5]], [[0.5, 0.5]]]]),
                  hint="valid_lens[b] holds for every head of batch element b")


def check_attention_pool_values(attention_pool):
    """Does attention_pool divide the scores by sqrt(p) and return (output, weights)?"""
    c = math.log(3) / 2
    Q, K, V = tensor([[[1, 1, 1, 1]]]), tensor([[[0, 0, 0, 0], [c, c, c, c]]]), tensor([[[4], [8]]])
    output, weights = expect_pair("attention_pool(Q, K, V)", attention_pool(Q, K, V))
    expect_tensor("weights of attention_pool(Q = [[[1, 1, 1, 1]]], K = [[[0, 0, 0, 0], [c, c, c, c]]], "
                  "c = ln(3)/2), scores [0, ln 3] after dividing by sqrt(p) = 2",
                  actual=weights, expected=tensor([[[0.25, 0.75]]]), hint="divide Q Kᵀ by sqrt(p), p = Q.shape[-1]")
    expect_tensor("output of the same call with V = [[[4], [8]]]: 0.25 * 4 + 0.75 * 8",
                  actual=output, expected=tensor([[[7]]]))
    output, weights = expect_pair("attention_pool(Q, K, V)", attention_pool(
        torch.ones(2, 3, 5, 4, dtype=torch.float64), torch.ones(2, 3, 6, 4, dtype=torch.float64),
        torch.ones(2, 3, 6, 7, dtype=torch.float64)))
    expect_shape("output of attention_pool(Q (2, 3, 5, 4), K (2, 3, 6, 4), V (2, 3, 6, 7))",
                 actual=output, expected=(2, 3, 5, 7))
    expect_shape("weights of the same call", actual=weights, expected=(2, 3, 5, 6))


def check_attention_pool_masked(attention_pool):
    """Does attention_pool give masked keys weight 0, and a query with no valid key zeros?"""
    # keys 0 and 1 score the same whatever the scale, key 2 far more: only the mask matters here
    Q, K, V = tensor([[[1, 1, 1, 1]]]), tensor([[[0, 0, 0, 0], [0, 0, 0, 0], [9, 9, 9, 9]]]), \
        tensor([[[4], [8], [100]]])
    output, weights = expect_pair("attention_pool(Q, K, V, valid_lens)", attention_pool(Q, K, V, torch.tensor([2])))
    expect_tensor("weights of attention_pool(Q = [[[1, 1, 1, 1]]], K = [[[0, 0, 0, 0], [0, 0, 0, 0], "
                  "[9, 9, 9, 9]]], valid_lens = [2]): key 2 is masked",
                  actual=weights, expected=tensor([[[0.5, 0.5, 0]]]),
                  hint="keys at or past valid_lens get weight 0 before anything is pooled")
    expect_tensor("output of the same call with V = [[[4], [8], [100]]]: 0.5 * 4 + 0.5 * 8",
                  actual=output, expected=tensor([[[6]]]))
    Q, K, V = torch.zeros(1, 1, 1, dtype=torch.float64), torch.zeros(1, 3, 1, dtype=torch.float64), \
        tensor([[[1, 2], [3, 4], [5, 6]]])
    output, weights = expect_pair("attention_pool(Q, K, V, valid_lens)", attention_pool(Q, K, V, torch.tensor([0])))
    expect_tensor("weights of attention_pool(Q = 0, K = 0, V = [[[1, 2], [3, 4], [5, 6]]], valid_lens = [0])",
                  actual=weights, expected=tensor([[[0, 0, 0]]]),
                  hint="a query with no valid key gives weights 0, not uniform, not NaN")
    expect_tensor("output of the same call: no valid key, so zeros",
                  actual=output, expected=tensor([[[0, 0]]]))
    output, weights = expect_pair("attention_pool(Q, K, V, valid_lens)", attention_pool(
        torch.zeros(2, 2, 1, 1, dtype=torch.float64), torch.zeros(2, 2, 2, 1, dtype=torch.float64),
        tensor([[[[2], [4]], [[6], [8]]], [[[2], [4]], [[6], [8]]]]), torch.tensor([1, 2])))
    expect_tensor("weights of attention_pool(Q = 0 (2, 2, 1, 1), K = 0 (2, 2, 2, 1), V, valid_lens = [1, 2])",
                  actual=weights, expected=tensor([[[[1, 0]], [[1, 0]]], [[[0.5, 0.5]], [[0.5, 0.5]]]]),
                  hint="valid_lens[b] holds for every head of batch element b")


def check_MultiHeadAttention_params(MultiHeadAttention):
    """Does MultiHeadAttention own W_q, W_k, W_v = Linear(d_model, d_total) and W_o = Linear(d_total, d_model)?"""
    for d_model, num_heads, d_total in [(8, 3, 12), (8, 2, 8)]:
        model = MultiHeadAttention(d_model, num_heads, d_total=d_total)
        for name, shape in [("W_q", (d_total, d_model)), ("W_k", (d_total, d_model)),
                            ("W_v", (d_total, d_model)), ("W_o", (d_model, d_total))]:
            layer = getattr(model, name, None)
            what = f"MultiHeadAttention({d_model}, {num_heads}, d_total={d_total}).{name}"
            expect_instance(what, actual=layer, expected=nn.Linear)
            expect_shape(f"{what}.weight", actual=layer.weight, expected=shape)


def check_MultiHeadAttention_raises(MultiHeadAttention):
    """Does MultiHeadAttention raise ValueError when num_heads does not divide d_total, and only then?"""
    MultiHeadAttention(8, 2)                                # a possible one builds
    expect_raises("MultiHeadAttention(8, 3) (d_total = 8 is not divisible by 3 heads)",
                  ValueError, MultiHeadAttention, 8, 3)
    expect_raises("MultiHeadAttention(8, 4, d_total=10) (10 is not divisible by 4 heads)",
                  ValueError, MultiHeadAttention, 8, 4, d_total=10)
    MultiHeadAttention(10, 4, d_total=12)                   # 4 heads divide d_total = 12, not d_model


def check_MultiHeadAttention_values(MultiHeadAttention):
    """Does MultiHeadAttention's forward give the right output and attention_weights on hand-made examples?"""
    model = set_weights(MultiHeadAttention(2, 2).double().eval())   # p = 1: head j reads feature j
    keys = tensor([[[1, 0], [0, 1]]])
    output = model(tensor([[[math.log(3), 0]]]), keys, keys)
    expect_tensor("attention_weights after MultiHeadAttention(2, 2) with identity weights, queries = "
                  "[[[ln 3, 0]]], keys = values = [[[1, 0], [0, 1]]]",
                  actual=model.attention_weights, expected=tensor([[[[0.75, 0.25]], [[0.5, 0.5]]]]),
                  hint="head 0 scores [ln 3, 0] from feature 0, head 1 scores [0, 0] from feature 1")
    expect_tensor("output of the same call: head 0 pools feature 0, head 1 feature 1",
                  actual=output, expected=tensor([[[0.75, 0.5]]]))

    model = set_weights(MultiHeadAttention(4, 2).double().eval())   # p = 2: head 0 reads features 0-1
    c = math.log(3) / math.sqrt(2)
    keys = tensor([[[0, 0, 0, 0], [c, c, 0, 0]]])
    output = model(tensor([[[1, 1, 0, 0]]]), keys, keys)
    expect_tensor("attention_weights of MultiHeadAttention(4, 2) with identity weights, queries = "
                  "[[[1, 1, 0, 0]]], keys = values = [[[0, 0, 0, 0], [c, c, 0, 0]]], c = ln(3)/sqrt(2)",
                  actual=model.attention_weights, expected=tensor([[[[0.25, 0.75]], [[0.5, 0.5]]]]),
                  hint="head 0 scores [0, 2c] / sqrt(p) = [0, ln 3]: divide by sqrt(p), p = d_total / num_heads")
    expect_tensor("output of the same call: 0.75 of key 1's features 0-1 from head 0, zeros from head 1",
                  actual=output, expected=tensor([[[0.75 * c, 0.75 * c, 0, 0]]]))

    model = set_weights(MultiHeadAttention(8, 2).double().eval(), seed=0)
    generator = torch.Generator().manual_seed(1)
    queries = torch.randn(2, 3, 8, dtype=torch.float64, generator=generator)
    keys = torch.randn(2, 5, 8, dtype=torch.float64, generator=generator)
    output = model(queries, keys, keys)
    expect_shape("MultiHeadAttention(8, 2)(queries (2, 3, 8), keys = values (2, 5, 8))",
                 actual=output, expected=(2, 3, 8))
    expect_shape("attention_weights of the same call (batch, num_heads, n_q, n_k)",
                 actual=model.attention_weights, expected=(2, 2, 3, 5))


def check_MultiHeadAttention_masked(MultiHeadAttention):
    """Does MultiHeadAttention's forward honour valid_lens of shape (batch,) and (batch, n_q)?"""
    model = set_weights(MultiHeadAttention(2, 2).double().eval())   # p = 1: head j reads feature j
    keys = tensor([[[1, 0], [0, 1], [5, 5]]])
    output = model(tensor([[[math.log(3), 0]]]), keys, keys, torch.tensor([2]))
    expect_tensor("attention_weights after MultiHeadAttention(2, 2) with identity weights, queries = "
                  "[[[ln 3, 0]]], keys = values = [[[1, 0], [0, 1], [5, 5]]], valid_lens = [2]",
                  actual=model.attention_weights, expected=tensor([[[[0.75, 0.25, 0]], [[0.5, 0.5, 0]]]]),
                  hint="head 0 scores [ln 3, 0] from feature 0, head 1 scores [0, 0] from feature 1; key 2 is masked")
    expect_tensor("output of the same call: head 0 pools feature 0, head 1 feature 1",
                  actual=output, expected=tensor([[[0.75, 0.5]]]))
    output = model(tensor([[[math.log(3), 0], [math.log(3), 0]]]), keys, keys, torch.tensor([[2, 0]]))
    expect_tensor("attention_weights of the same module, queries = [[[ln 3, 0], [ln 3, 0]]], "
                  "valid_lens = [[2, 0]] (one length per query row)",
                  actual=model.attention_weights,
                  expected=tensor([[[[0.75, 0.25, 0], [0, 0, 0]], [[0.5, 0.5, 0], [0, 0, 0]]]]),
                  hint="valid_lens[b, i] holds for query i of every head; length 0 gives zeros")
    expect_tensor("output of the same call: the second query has no valid key",
                  actual=output, expected=tensor([[[0.75, 0.5], [0, 0]]]))

    model = set_weights(MultiHeadAttention(8, 2).double().eval(), seed=0)
    generator = torch.Generator().manual_seed(1)
    queries = torch.randn(2, 3, 8, dtype=torch.float64, generator=generator)
    keys = torch.randn(2, 5, 8, dtype=torch.float64, generator=generator)
    output = model(queries, keys, keys, torch.tensor([2, 5]))
    expect_shape("MultiHeadAttention(8, 2)(queries (2, 3, 8), keys = values (2, 5, 8), valid_lens = [2, 5])",
                 actual=output, expected=(2, 3, 8))
    expect_tensor("attention_weights[0, :, :, 2:] of the same call (keys past valid length 2)",
                  actual=model.attention_weights[0, :, :, 2:], expected=torch.zeros(2, 3, 3, dtype=torch.float64))
