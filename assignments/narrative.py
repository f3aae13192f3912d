r"""The words of the assignment: the notebook's text, its sections and the questions.

``assignments/build.py`` puts these around the code it takes from ``solutions/mha.py`` and
the checks it takes from ``assignments/public_checks.py``. The instructor edits the
narrative here; the section numbers and short titles also go into the stub's
``NotImplementedError`` pointers ("see section 3 (per-head split) of mha.ipynb").

Per-student numbers are written ``<<name>>``: ``render`` fills them in from a variant
(``autograder.variants.Variant.values``), so each student's notebook shows their own sizes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PLACEHOLDER = re.compile(r"<<(\w+)>>")


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
    figure: str = ""    # a figure of assignments.figures drawn under the text ("block", "split")


@dataclass(frozen=True)
class Question:
    """A written question, graded by hand in nbgrader as a "manually graded task": the
    prompt is shown; the model answer and the rubric sit in a mark scheme region, which
    nbgrader cuts from the release and puts back for the graders."""

    grade_id: str
    prompt: str
    answer: str                             # the model answer
    rubric: tuple[tuple[float, str], ...]   # (points, criterion): what earns the points

    @property
    def points(self) -> float:
        return sum(points for points, _ in self.rubric)


def render(text: str, values: dict[str, str]) -> str:
    """``text`` with every ``<<name>>`` replaced by its value; an unknown name is an error."""
    def value(match):
        if match.group(1) not in values:
            raise KeyError(f"the narrative names <<{match.group(1)}>>, which no variant defines")
        return values[match.group(1)]
    return PLACEHOLDER.sub(value, text)


NOTEBOOK_NAME = "mha.ipynb"

TITLE = r"""# Multi-head attention, part by part

In this assignment you build multi-head attention (*Dive into Deep Learning*, section 11.5)
from small parts, each of which you can test on its own:

1. the shape rules of the per-head projection matrices,
2. the projections themselves, in row and in column (vector) form,
3. splitting one wide projection into heads,
4. attention pooling with masks,
5. concatenating the heads again,
6. the `MultiHeadAttention` module that puts the parts together, and a picture of its heads,

then you answer two numeric questions (graded automatically) and three short written
questions (graded by hand).

![Figure 1](attachment:block_diagram.svg)

*Figure 1.* Multi-head attention. The same queries, keys and values go to every head; head
$j$ projects them with its own matrices $W_j^q, W_j^k, W_j^v$ and pools with the attention
pooling $f$; the $M$ outputs $h_1, \dots, h_M$ are concatenated and projected by $W_o$.

**Notation.** Rows are tokens (row-vector convention): the input $H$ has shape $n \times d$
and a projection is `H @ W`. $M$ is the number of heads (`num_heads`), $d_\text{total}$ the
total projection width over all heads ($p_o$ in D2L; the course's $d_h$) and
$p = d_\text{total} / M$ the width of one head (`head_dim`). Batches come first, and per-head
tensors have the layout `(batch, num_heads, seq, p)`.

**Your numbers.** The sizes in the worked examples and in the numeric questions of this
notebook are your own: other students have other numbers. Answer with the numbers *of
this notebook*.

**How to work.** Fill in every cell that says `# YOUR CODE HERE` (delete the
`raise NotImplementedError()` line), then run the test cell under it. Do not rename the
functions or change their signatures, and do not edit the test cells. The public tests
are small examples you can check by hand; the hidden tests check many more shapes,
masks, dtypes and devices, so passing the public tests does not guarantee full marks.
Every function must leave its inputs unchanged and return tensors on the inputs' device
and in their dtype. Build everything from your own parts: `torch.nn.MultiheadAttention`
and `torch.nn.functional.scaled_dot_product_attention` are not allowed.
"""

IMPORTS_TEXT = r"""Run the next three cells first: the imports, the helpers that the test cells use, and
the helper that draws your heads in section 6."""

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
usual choice $d_\text{total} = d$, one head's key matrix is $d \times d/M$: for $d = <<ex_d>>$
and $M = <<ex_heads>>$ heads, $<<ex_d>> \times <<ex_p>>$.

**Cost parity.** Why split $d_\text{total}$ instead of giving every head the full width?
D2L sets $p_q h = p_k h = p_v h = p_o$: here $p \cdot M = d_\text{total}$. Then

* **parameters:** the heads of one role hold $M \cdot d \cdot p = d \, d_\text{total}$
  parameters, exactly as many as one head of width $d_\text{total}$;
* **matrix products:** the same FLOPs too. The projections cost $M \cdot n d p = n d \, d_\text{total}$
  multiply-adds per role, the scores $Q K^\top$ of all heads $M \cdot n_q n_k p = n_q n_k d_\text{total}$,
  and the weighted sum of the values as much again;
* **softmax:** this is where the two differ. Every head has its own $n_q \times n_k$ weights,
  so the scaling, the mask and the softmax run on $M \cdot n_q n_k$ entries instead of
  $n_q n_k$, and the attention weights take $M$ times the memory.

A worked example: self-attention ($n_q = n_k = n$) on $n = <<ex_n>>$ tokens with
$d = d_\text{total} = <<ex_d>>$, batch 1. With $M = <<ex_heads>>$ heads or with one head, the
module holds $4 d^2 = <<ex_params>>$ weights ($<<ex_params_role>>$ per role) and its matrix
products cost $8 n d^2 + 4 n^2 d = <<ex_flops>>$ FLOPs (2 per multiply-add, as
`torch.utils.flop_counter` counts them: $<<ex_proj_flops>>$ for the four projections,
$<<ex_score_flops>>$ for scores and weighted sums). The softmax runs on
$M n^2 = <<ex_softmax_many>>$ entries against $n^2 = <<ex_softmax_one>>$: $M$ times more, and
still far fewer operations than the products while $n$ is small next to $d$.

Since the heads are independent, they all run in parallel: one batched matrix product,
not a Python loop over heads.

If $M$ does not divide $d_\text{total}$, the heads cannot have equal widths, and the
configuration is impossible.""", (
        Item("head_weight_shape", 1, r"""**Task.** `head_weight_shape(d, d_total, num_heads)` returns the shape of one head's
matrix, `(d, d_total // num_heads)`. It raises a `ValueError` with a clear message if
any argument is smaller than 1 or `d_total` is not divisible by `num_heads`."""),
    )),
    Section(2, "Projection", "projection", r"""In the row-vector convention a projection is one matrix product: every row (token) of
$H$ is multiplied by $W$. Batches and heads are leading axes that `@` broadcasts over.

**The same head in vector form.** D2L writes head $i$ for one query $q \in \mathbb{R}^{d_q}$,
key $k \in \mathbb{R}^{d_k}$ and value $v \in \mathbb{R}^{d_v}$, as column vectors:

$$h_i = f\big(W_i^{(q)} q,\; W_i^{(k)} k,\; W_i^{(v)} v\big) \in \mathbb{R}^{p_v},
\qquad W_i^{(q)} \in \mathbb{R}^{p_q \times d_q},\; W_i^{(k)} \in \mathbb{R}^{p_k \times d_k},\;
W_i^{(v)} \in \mathbb{R}^{p_v \times d_v},$$

where $f$ is an attention pooling, additive or scaled dot-product (this assignment uses
scaled dot-product, with $d_q = d_k = d_v = d$ and $p_q = p_k = p_v = p$). A matrix acts
on a column from the left, so the matrix has shape (out × in) $= p \times d$. In the row
form a token is a row $x^\top$ of $H$, and its query is the row $(W_i^{(q)} x)^\top =
x^\top (W_i^{(q)})^\top$. So the two forms hold the same numbers, transposed:

$$W_i^q = \big(W_i^{(q)}\big)^\top \in \mathbb{R}^{d \times p}.$$

`nn.Linear(d, p)` stores its `weight` the vector-form way, shape `(out, in)` $= (p, d)$, and
computes `x @ weight.T`, the row form: `layer.weight` is $W^{(q)}$ and `layer.weight.T` is
$W^q$.

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
weight has shape `(d_total, d)` (out × in: the vector form's matrices of all heads,
stacked) and `layer(H)` computes `H @ layer.weight.T`. So rows $[\,jp, (j+1)p\,)$ of
`W_q.weight` are head $j$'s $W_j^{(q)}$ ($p \times d$), and head $j$'s row-form query matrix
is `W_q.weight[j*p:(j+1)*p, :].T` ($d \times p$).

To pool each head separately we move the heads to their own axis:
`(batch, n, num_heads * p)` → `(batch, num_heads, n, p)`, as figure 2 shows. For example,
with one batch element, $n = 2$ positions, $M = 2$ heads and $p = 2$:

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
    ), figure="split"),
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
shape `(batch, num_heads, n_q, n_k)`, in `self.attention_weights` (before dropout).

**Dropout sits inside the pooling.** It acts on the attention weights, in training mode
only (`nn.Dropout` does exactly that): between the softmax and the product with $V$.
`attention_pool` returns `weights @ V` already, so it leaves no place for it. Build
`forward` from `split_heads`, `masked_softmax`, your own two products (scores
$Q K^\top / \sqrt{p}$, then `dropout(weights) @ V`) and `concat_heads`, the way
`attention_pool` computes them inside.

Count the parameters: $4 \, d_\text{model} \, d_\text{total}$ (plus biases), whatever $M$ is.
With $d_\text{model} = d_\text{total} = <<ex_d>>$ that is $<<ex_params>>$ for $M = 1$ and
for $M = <<ex_heads>>$ alike: the cost parity of section 1.

**How do the heads come to differ?** Three facts, and one honest caveat.

* *Distinct projections give each head its own subspace and its own similarity.* Head $j$
  compares a query $x$ with a key $y$ through $x^\top W_j^q (W_j^k)^\top y$: a bilinear
  form of rank at most $p$, its own measure of "similar", on its own $p$-dimensional
  projection of the tokens, and it reads out what $W_j^v$ keeps of the values.
* *Different initial values give different gradients.* `nn.Linear` draws every entry of
  its weight independently, so the heads' blocks start different: different scores,
  different attention weights, different outputs. The gradient of a head's block depends
  on its own weights and on its own block of $W_o$, so each head is moved differently by
  every step of training.
* *The converse is exact.* Heads identical in every parameter (their block of $W_o$
  included) compute the same thing and get identical gradients: gradient descent keeps
  them identical forever. If all heads shared one set of $W^q, W^k, W^v$, they would
  compute identical outputs and $M$ heads would collapse into one head repeated $M$ times.
* *Nothing forces diversity.* The loss has no term that pushes heads apart. Heads start
  different by chance and training may or may not keep them apart; in trained models
  many heads turn out redundant, and a large share of them can be pruned with little
  loss (Michel, Levy and Neubig, 2019, "Are Sixteen Heads Really Better than One?";
  Voita et al., 2019). Distinct heads are a *possibility* that distinct parameters open,
  not a guarantee.

Figure 3, under the module's tests, shows your own heads.""", (
        Item("MultiHeadAttention", 3, r"""**Task.** Write `__init__` and `forward`. Build them from your own parts (`split_heads`,
`masked_softmax`, `concat_heads`, and the two products of the pooling, as explained
above); keep `self.attention_weights` as given."""),
    )),
)

#: Figure 3: drawn by the student's kernel after the module's tests (not by the grader).
HEADS_FIGURE = r"""*Figure 3.* Run the next cell once your module passes its tests. `show_heads` builds
your `MultiHeadAttention(16, 4)`, runs self-attention on 8 random tokens and draws each
head's attention weights (top row). Then it copies head 0's blocks of `W_q`, `W_k`,
`W_v` into every other head's block, so that all heads share one set of weights, and draws
the maps again (bottom row). Distinct projections give four different maps; one shared set
gives four identical ones, the collapse described above."""

HEADS_CALL = """\
# Figure 3: your heads (top) and the same module with one set of weights shared by all heads
# (bottom). The autograder does not run this cell.
if __name__ == "__main__":
    show_heads(MultiHeadAttention, d_model=16, num_heads=4, n=8, seed=0)"""

HEADS_HELPER = "# The helper that draws figure 3 (section 6). Run this cell; do not edit it.\n\n"

NUMERIC_SECTION = (7, "Numbers to check", r"""Two questions about sizes, graded automatically. Answer each in the cell below by
replacing the `raise` line of its function with `return` and your number(s): plain
Python integers, no tensors. Work them out by hand from the rules of section 1, and check
them with code if you like (`head_weight_shape`, or counting the parameters of your own
module with `sum(p.numel() for p in model.parameters())`). Mind your numbers: they are
not your neighbour's.

**Question 1.** Multi-head attention on inputs of width $d = <<key_d>>$, with
$d_\text{total} = d_h = <<key_d_total>>$ (the total key width over all heads) and
$M = <<key_heads>>$ heads. What is the shape (rows, columns) of **one head's** key matrix
$W_j^k$ in the row-vector form $K^{[j]} = H W_j^k$? `key_matrix_shape()` returns it as a
tuple `(rows, columns)`.

**Question 2.** Take $d = <<param_d>>$. How many parameters do the query, key and value
matrices hold together (no biases, no $W_o$)

* for $M = <<param_heads>>$ heads, each of width $d/M$: `params_many_heads()`;
* for one head of width $d$: `params_one_head()`?""")

NUMERIC_CELL = """\
# Your answers to the numeric questions of section 7: replace each `raise` line by
# `return` and your number(s), e.g. `return (12, 3)` or `return 4096`.

def key_matrix_shape():
    \"\"\"Question 1: (rows, columns) of one head's key matrix W_j^k.\"\"\"
    ### BEGIN SOLUTION
    return <<answer_key_matrix_shape>>
    ### END SOLUTION


def params_many_heads():
    \"\"\"Question 2: parameters of the query, key and value matrices of M heads of width d/M.\"\"\"
    ### BEGIN SOLUTION
    return <<answer_params_many_heads>>
    ### END SOLUTION


def params_one_head():
    \"\"\"Question 2: parameters of the query, key and value matrices of one head of width d.\"\"\"
    ### BEGIN SOLUTION
    return <<answer_params_one_head>>
    ### END SOLUTION"""

NUMERIC_ANSWERS = ("key_matrix_shape", "params_many_heads", "params_one_head")
NUMERIC_GRADE_ID = "numeric_answers"

QUESTIONS_SECTION = (8, "Written questions", r"""Answer each question in a few sentences, in the cell under it (double-click it to edit).
Be concrete: refer to the equations and shapes above. These answers are graded by hand,
each on the criteria its points are given for.""")

QUESTIONS = (
    Question("written_distinct_projections",
             r"""**(a)** Why does each head need its own projection matrices $W_j^q, W_j^k, W_j^v$?""",
             r"""The pooling $f(Q, K, V)$ has no parameters and every head reads the same input $H$,
so the projections are the only place where heads can differ. $W_j^q$ and $W_j^k$ decide
which features head $j$ compares (its similarity $x^\top W_j^q (W_j^k)^\top y$, its notion of
relevance) and $W_j^v$ decides what it reads out. With its own matrices each head can
attend by a different criterion, so one query can get several different attention
distributions at once, over different $p$-dimensional subspaces, which one softmax cannot
give. With $p = d_\text{total}/M$ this costs no more parameters, nor matrix-product FLOPs,
than one wide head.""",
             ((1.0, "Says that f has no parameters and all heads read the same input, so without "
                    "their own projections all heads would compute the same thing."),
              (0.5, "Says what the matrices choose: W^q, W^k what is compared (the similarity), "
                    "W^v what is read out."),
              (0.5, "Names the gain: several attention distributions (subspaces) per query at "
                    "the cost of one wide head."))),
    Question("written_specialisation",
             r"""**(b)** All heads read the same input. How do they come to specialise, each attending to
different things, and is that guaranteed?""",
             r"""Their parameters differ, and that is all. Each head's blocks of $W^q, W^k, W^v$ (and
of $W_o$) are drawn independently at initialisation, so at step 0 the heads already
compute different projections, scores, weights and outputs. Different values give
different gradients (the gradient of head $j$'s blocks goes through its own scores and
its own block of $W_o$), so training moves each head differently, and each can settle on
a different relation in its own subspace. Nothing in the loss pushes heads apart, though:
diversity is not guaranteed, and trained models often have redundant heads, many of
which can be pruned with little loss (Michel et al., 2019). Heads identical in every
parameter would get identical gradients and never diverge.""",
             ((0.5, "Symmetry is broken by the independent random initialisation of each head's "
                    "blocks (distinct projections: own subspace and similarity)."),
              (0.5, "Different values give different gradients (through each head's own scores "
                    "and W_o block), so training moves the heads apart."),
              (1.0, "Honest about the limit: nothing forces diversity; heads may end up "
                    "redundant (prunable), and identical heads stay identical. No credit for "
                    "'training makes them complementary' without this."))),
    Question("written_shared_weights",
             r"""**(c)** What exactly breaks if all heads share one set of $W^q, W^k, W^v$?""",
             r"""Every head then computes the same $Q, K, V$, hence the same scores, the same attention
weights and the same output $h$. The concatenation $[h | \cdots | h]\, W_o$ equals
$h \sum_j W_o^{(j)}$ (the sum of $W_o$'s row blocks): the $M$ heads collapse into **one**
head of width $p = d_\text{total}/M$, narrower than a single wide head, repeated $M$ times.
Each query gets one attention distribution instead of $M$, the `attention_weights` of all
heads are identical (figure 3, bottom row), the softmax work is done $M$ times for
nothing, and since the heads stay identical under training (identical gradients), they
can never specialise.""",
             ((1.0, "Identical Q, K, V, so identical weights and outputs in every head; "
                    "[h|...|h] W_o = h (sum of W_o's blocks): one head of width p."),
              (0.5, "One attention distribution per query instead of M; the extra work buys "
                    "nothing."),
              (0.5, "Identical gradients: the heads stay identical under training, they can "
                    "never specialise."))),
)

ANSWER_CELL = "*Your answer:* YOUR ANSWER HERE"
