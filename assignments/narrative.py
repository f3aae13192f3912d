r"""The words of the assignment: the notebook's text, its sections and the written questions.

``assignments/build.py`` puts these around the code it takes from ``solutions/mha.py`` and
the checks it takes from ``assignments/public_checks.py``. The instructor edits the
narrative here; the section numbers and short titles also go into the stub's
``NotImplementedError`` pointers ("see section 3 (per-head split) of mha.ipynb").
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    """One graded function or class of the reference, with the text that introduces it."""

    api: str        # the name in solutions/mha.py; also the graded cell's grade_id
    points: int     # points of its public test cell
    text: str       # markdown shown just before the graded cell


@dataclass(frozen=True)
class Section:
    """One numbered part of the notebook."""

    number: int
    title: str      # the heading: "Per-head split"
    short: str      # the name used in the stub's pointers: "per-head split"
    text: str       # markdown under the heading
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Question:
    """A written question, graded by hand in nbgrader."""

    grade_id: str
    points: int
    prompt: str     # read-only markdown cell
    answer: str     # the model answer; nbgrader replaces it with "YOUR ANSWER HERE" on release


NOTEBOOK_NAME = "mha.ipynb"

TITLE = r"""# Multi-head attention, part by part

In this assignment you build multi-head attention (*Dive into Deep Learning*, section 11.5)
from small parts, each of which you can test on its own:

1. the shape rules of the per-head projection matrices,
2. the projections themselves,
3. splitting one wide projection into heads,
4. attention pooling with masks,
5. concatenating the heads again,
6. the `MultiHeadAttention` module that puts the parts together,

and you answer three short written questions at the end.

**Notation.** Rows are tokens (row-vector convention): the input $H$ has shape $n \times d$
and a projection is `H @ W`. $M$ is the number of heads (`num_heads`), $d_\text{total}$ the
total projection width over all heads ($p_o$ in D2L) and $p = d_\text{total} / M$ the width
of one head (`head_dim`). Batches come first, and per-head tensors have the layout
`(batch, num_heads, seq, p)`.

**How to work.** Fill in every cell that says `# YOUR CODE HERE` (delete the
`raise NotImplementedError()` line), then run the test cell under it. Do not rename the
functions or change their signatures, and do not edit the test cells. The public tests
are small examples you can check by hand; the hidden tests check many more shapes,
masks, dtypes and devices, so passing the public tests does not guarantee full marks.
Every function must leave its inputs unchanged and return tensors on the inputs' device
and in their dtype. Build everything from your own parts: `torch.nn.MultiheadAttention`
and `torch.nn.functional.scaled_dot_product_attention` are not allowed.
"""

IMPORTS_TEXT = r"""Run the next two cells first: the imports, and the helpers that the test cells use."""

STUB_DOCSTRING = r'''"""Multi-head attention, part by part: your implementation.

Fill in every function that raises NotImplementedError; the message points to the
section of mha.ipynb that explains it. Run ``pytest`` in this folder for the public
tests (small examples you can check by hand); the graders run many more.

{notation}
"""'''

PUBLIC_TESTS_DOCSTRING = r'''"""Public tests for mha.py: run ``pytest`` in this folder.

Each test runs a few small, fixed examples you can check by hand, and says what it
expected and what came back. Passing them does not mean full marks: the hidden tests
check many more shapes, masks, dtypes and devices. The same checks run in the test
cells of mha.ipynb.
"""'''

SECTIONS = (
    Section(1, "Shape rules", "shape rules", r"""Multi-head attention runs $M$ attention heads side by side on the **same** input
$H \in \mathbb{R}^{n \times d}$. Head $j$ has its own three projection matrices:

$$Q^{[j]} = H W_j^q, \qquad K^{[j]} = H W_j^k, \qquad V^{[j]} = H W_j^v,
\qquad W_j^q, W_j^k, W_j^v \in \mathbb{R}^{d \times d_\text{total}/M}.$$

Read the shape of $W_j$ off the product: it has $d$ rows because it multiplies the $d$
features of each row of $H$, and $d_\text{total}/M$ columns because the $M$ heads share
the total width $d_\text{total}$ equally, $p = d_\text{total}/M$ columns each. With the
usual choice $d_\text{total} = d$, one head's key matrix is $d \times d/M$: for $d = 512$
and $M = 8$ heads, $512 \times 64$.

**Cost parity.** Why split $d_\text{total}$ instead of giving every head the full width?
With $p \cdot M = d_\text{total}$ (D2L: $p_q h = p_k h = p_v h = p_o$), the heads of one role
hold $M \cdot d \cdot p = d \cdot d_\text{total}$ parameters, exactly as many as a single
head of width $d_\text{total}$. The FLOPs match too: the projections cost
$M \cdot n d p = n d \, d_\text{total}$ and the scores $M \cdot n_q n_k p = n_q n_k d_\text{total}$.
So $M$ heads cost what one wide head costs, and since they are independent, they all run
in parallel (one batched matrix product, not a Python loop over heads).

If $M$ does not divide $d_\text{total}$, the heads cannot have equal widths, and the
configuration is impossible.""", (
        Item("head_weight_shape", 1, r"""**Task.** `head_weight_shape(d, d_total, num_heads)` returns the shape of one head's
matrix, `(d, d_total // num_heads)`. It raises a `ValueError` with a clear message if
any argument is smaller than 1 or `d_total` is not divisible by `num_heads`."""),
    )),
    Section(2, "Projection", "projection", r"""In the row-vector convention a projection is one matrix product: every row (token) of
$H$ is multiplied by $W$. Batches and heads are leading axes that `@` broadcasts over.

**Why does every head need its own matrices?** The attention pooling
$f(Q, K, V) = \operatorname{softmax}(Q K^\top/\sqrt{p})\,V$ has no parameters of its own, and
all heads read the same $H$. Whatever makes head $j$ different from head $i$ lives in
$W_j^q, W_j^k, W_j^v$: the query and key matrices choose which features a head compares
(its notion of "relevant"), the value matrix chooses what it reads out. Distinct matrices
let the heads attend by different criteria at the same time, in different representation
subspaces.""", (
        Item("project", 1, r"""**Task.** `project(H, W)` computes $H W$ for `H` of shape `(..., n, d)` and `W` of shape
`(d, p)`, giving `(..., n, p)`. For one head, $Q^{[j]} = H W_j^q$ is `project(H, W_q_j)`."""),
        Item("project_heads", 2, r"""Now all heads at once. Stack the $M$ matrices of one role into `W_heads` of shape
`(num_heads, d, p)`, with `W_heads[j]` $= W_j$. `project_heads(H, W_heads)` returns
`(batch, num_heads, n, p)`, where `out[:, j] = H @ W_heads[j]` uses head $j$'s matrix
only.

*Hint:* give `H` a head axis of size 1, `(batch, 1, n, d)`, and let broadcasting pair it
with every head's matrix in one product. No loop over heads."""),
    )),
    Section(3, "Per-head split", "per-head split", r"""In practice we do not keep $M$ separate matrices per role: we put them side by side,

$$W^q = \big[\, W_1^q \;\big|\; W_2^q \;\big|\; \cdots \;\big|\; W_M^q \,\big] \in \mathbb{R}^{d \times d_\text{total}},
\qquad H W^q = \big[\, Q^{[1]} \;\big|\; Q^{[2]} \;\big|\; \cdots \;\big|\; Q^{[M]} \,\big].$$

One wide product computes every head's projection, and head $j$'s queries are columns
$[\,jp, (j+1)p\,)$ of the result. The heads still have their own matrices: they are
different blocks of one parameter. This is what `nn.Linear(d, d_total)` holds; its
weight has shape `(d_total, d)` (out × in) and `layer(H)` computes `H @ layer.weight.T`,
so head $j$'s query matrix is `W_q.weight[j*p:(j+1)*p, :].T`.

To pool each head separately we move the heads to their own axis:
`(batch, n, num_heads * p)` → `(batch, num_heads, n, p)`. For example, with one batch
element, $n = 2$ positions, $M = 2$ heads and $p = 2$:

| | position 0 | position 1 |
|---|---|---|
| input `X[0]` | `[0, 1, 2, 3]` | `[4, 5, 6, 7]` |
| head 0, `out[0, 0]` | `[0, 1]` | `[4, 5]` |
| head 1, `out[0, 1]` | `[2, 3]` | `[6, 7]` |

*Careful:* reshaping straight to `(batch, num_heads, n, p)` has the right shape but mixes
positions into heads. Reshape to `(batch, n, num_heads, p)` first, then swap the two
middle axes.""", (
        Item("split_heads", 2, r"""**Task.** `split_heads(X, num_heads)` turns `(batch, n, num_heads * p)` into
`(batch, num_heads, n, p)`, head $j$ getting columns $[\,jp, (j+1)p\,)$. It raises a
`ValueError` if the last axis is not divisible by `num_heads`."""),
    )),
    Section(4, "Pooling", "pooling", r"""Each head pools with scaled dot-product attention,

$$h_j = f\big(Q^{[j]}, K^{[j]}, V^{[j]}\big) = \operatorname{softmax}\!\Big(\frac{Q^{[j]} K^{[j]\top}}{\sqrt{p}}\Big) V^{[j]}.$$

The division by $\sqrt{p}$, the width of one head, keeps the scores' variance near 1
when the entries of queries and keys have unit variance, so the softmax does not
saturate as $p$ grows.

**Masks.** Sequences in a batch have different lengths, so keys past the end of a
sequence are padding. `valid_lens` says how many leading keys each query may attend to:

* shape `(batch,)`: `valid_lens[b]` holds for every query row of batch element `b`;
* shape `(batch, n_q)`: `valid_lens[b, i]` holds for query row `i` of element `b`;
* either way it broadcasts over every axis between batch and the last two (the heads).

A key at a position $\ge$ the valid length gets weight **exactly 0**. A query row whose
valid length is 0 gets **all-zero** weights (and so an all-zero output): not a uniform
row, and never NaN.""", (
        Item("masked_softmax", 3, r"""**Task.** `masked_softmax(scores, valid_lens=None)` is a softmax over the last axis
that follows the rules above.

*Pitfalls:* a fill value like `-1e6` overflows to `-inf` in float16 (its largest value
is 65504), and a row of `-inf` becomes 0/0 = NaN; `torch.finfo(scores.dtype).min` fits
every dtype. Do not write into `scores` in place: the caller still needs it. Build the
mask on `scores.device`."""),
        Item("attention_pool", 2, r"""**Task.** `attention_pool(Q, K, V, valid_lens=None)` takes `Q (..., n_q, p)`,
`K (..., n_k, p)` and `V (..., n_k, p_v)` and returns the pair
`(output (..., n_q, p_v), weights (..., n_q, n_k))`, with
`weights = masked_softmax(Q Kᵀ / sqrt(p), valid_lens)` and `output = weights V`."""),
    )),
    Section(5, "Concat", "concat", r"""The heads' outputs $h_1, \dots, h_M$, each $n \times p$, are concatenated along the
features and projected back with $W_o \in \mathbb{R}^{d_\text{total} \times d}$:

$$\text{output} = \big[\, h_1 \;\big|\; h_2 \;\big|\; \cdots \;\big|\; h_M \,\big]\, W_o .$$

Concatenating is the exact inverse of the split in section 3: head $j$ goes back to
columns $[\,jp, (j+1)p\,)$. Mind the memory layout: after a transpose the tensor is no
longer contiguous, and `.view` refuses it; `.reshape` copies when it has to.""", (
        Item("concat_heads", 2, r"""**Task.** `concat_heads(X)` turns `(batch, num_heads, n, p)` into
`(batch, n, num_heads * p)`, so that `concat_heads(split_heads(X, M))` gives back `X`."""),
    )),
    Section(6, "The module", "the module", r"""Now put the parts together. The module owns four parameters, by these names and types:

* `W_q`, `W_k`, `W_v` = `nn.Linear(d_model, d_total, bias=bias)`: every head's matrix of
  one role, as blocks of rows (section 3);
* `W_o` = `nn.Linear(d_total, d_model, bias=bias)`.

`d_total` defaults to `d_model`. `forward(queries, keys, values, valid_lens=None)`
projects, splits into heads, pools every head at once (with the mask), concatenates and
applies `W_o`; it returns `(batch, n_q, d_model)` and keeps that call's attention weights,
shape `(batch, num_heads, n_q, n_k)`, in `self.attention_weights`. Dropout, if any, acts
on the attention weights in training mode only (`nn.Dropout` does exactly that).

Count the parameters: $4 \, d_\text{model} \, d_\text{total}$ (plus biases), whatever $M$ is.
That is the cost parity of section 1.

**Distinct heads.** `nn.Linear` draws every entry of its weight independently, so the
heads' blocks start different, and that is what lets them learn different things. If all
heads shared one set of $W^q, W^k, W^v$, they would compute identical outputs and $M$
heads would collapse into one head repeated $M$ times. Initialising the heads to
identical values is no better: heads that are identical in every parameter (their
slice of $W_o$ included) get identical gradients, so gradient descent keeps them
identical forever.""", (
        Item("MultiHeadAttention", 3, r"""**Task.** Write `__init__` and `forward`. Build them from your own parts
(`split_heads`, `masked_softmax` or `attention_pool`, `concat_heads`); keep
`self.attention_weights` as given."""),
    )),
)

QUESTIONS_SECTION = (7, "Written questions", r"""Answer each question in a few sentences, in the cell under it. Be concrete: refer to the
equations and shapes above. These answers are graded by hand.""")

QUESTIONS = (
    Question("written_distinct_projections", 2,
             r"""**(a)** Why does each head need its own projection matrices $W_j^q, W_j^k, W_j^v$?""",
             r"""The pooling $f(Q, K, V)$ has no parameters and every head reads the same input $H$,
so the projections are the only place where heads can differ. $W_j^q$ and $W_j^k$ decide
which features head $j$ compares, that is its notion of relevance, and $W_j^v$ decides what
it reads out. With its own matrices each head can attend by a different criterion (say,
the previous token in one head and a related word in another), so one query gets several
attention distributions at once, in different representation subspaces, which a single
softmax cannot give. With $p = d_\text{total}/M$ this costs no more than one wide head."""),
    Question("written_specialisation", 2,
             r"""**(b)** All heads read the same input. How do they come to specialise, each attending to
different things?""",
             r"""Symmetry is broken at initialisation: each head's blocks of $W^q, W^k, W^v$ (and of
$W_o$) are drawn independently, so at step 0 the heads already compute different
projections, scores and outputs. Different outputs and different $W_o$ blocks give each
head a different gradient ($\partial L/\partial h_j$ goes through head $j$'s block of
$W_o$), and training amplifies whatever small advantage a head has for some relation.
Since $W_o$ combines the heads, a head that duplicates another adds little to the loss,
so the heads drift towards complementary patterns. Heads initialised identically in all
their parameters would get identical gradients and never diverge."""),
    Question("written_shared_weights", 2,
             r"""**(c)** What exactly breaks if all heads share one set of $W^q, W^k, W^v$?""",
             r"""Every head then computes the same $Q, K, V$, hence the same scores, the same attention
weights and the same output $h$. The concatenation $[h | \cdots | h]\, W_o$ equals
$h \sum_j W_o^{(j)}$ (the sum of $W_o$'s row blocks): the $M$ heads collapse into **one**
head of width $p = d_\text{total}/M$, narrower than a single wide head, repeated $M$ times.
Each query gets one attention distribution instead of $M$, the `attention_weights` of all
heads are identical, the pooling work is done $M$ times for nothing, and since the heads
stay identical under training (identical gradients), they can never specialise."""),
)
