"""The fixtures of test_fair.py: real-code mistakes whose evidence must be the mistake's own,
mistakes the grader used to miss, and correct code it used to penalise. Each is the reference
with a few changes, kept as patches on solutions/mha.py's text (as structure_fixtures.py
does) so that they follow the reference.

PATCHES maps a fixture's name to (what the change is, [(old, new), ...]); each old text must
occur exactly once in the reference. ``write(name, folder)`` writes the patched module.
EXPECTED maps each name to the diagnosis codes it must get (an empty set: none, and 100); a
fixture not in it is graded by its own test.
"""
from __future__ import annotations

from pathlib import Path

import structure_fixtures

FILL = """    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)
    # Masked keys get exactly 0; rows with no valid key (uniform so far) become all zero.
    return weights.masked_fill(~keep, 0.0)"""
QKV = """        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)"""
SCORES = "        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)"
OUT = "        return self.W_o(concat_heads(heads))                  # (batch, n_q, d_model)"
POOL = """        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)"""

#: Heads folded into the batch head-major (row h*batch + b), the lengths spread by ``lens``
HEAD_MAJOR = """        M, p, B = self.num_heads, self.head_dim, queries.shape[0]
        fold = lambda X: torch.cat(torch.split(X, p, dim=-1), dim=0)   # (M*B, n, p), head-major
        Q, K, V = fold(self.W_q(queries)), fold(self.W_k(keys)), fold(self.W_v(values))
        lens = None if valid_lens is None else {lens}
        weights = masked_softmax(torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(p), lens)
        weights = weights.reshape(M, B, *weights.shape[1:]).transpose(0, 1)
        self.attention_weights = weights
        V = V.reshape(M, B, *V.shape[1:]).transpose(0, 1)
        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)"""

PATCHES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # ---- item 1: evidence that is the mistake's own ------------------------------------
    'mask_float32_penalty': ('An additive penalty made in float32 (torch.zeros without a dtype): '
                             'float16 scores are promoted to float32, and the float32 weights '
                             'then meet float16 values in the matmul (a dtype mismatch, no '
                             'overflow).', [
        (FILL, """    penalty = torch.zeros(keep.shape, device=scores.device)   # float32, whatever scores are
    penalty = penalty.masked_fill(~keep, torch.finfo(torch.float32).min)
    weights = torch.softmax(scores + penalty, dim=-1)
    return weights.masked_fill(~keep, 0.0)"""),
    ]),
    'masked_fill_float_mask': ('The mask is made a float tensor before masked_fill: every masked '
                               'call raises (masked_fill takes boolean masks only).', [
        ("    keep = keys < lens                                        # (batch, 1.., n_q|1, n_k)",
         "    keep = (keys < lens).float()                               # 1.0 where kept"),
        (FILL, """    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(keep == 0, lowest), dim=-1)
    return weights.masked_fill(1 - keep, 0.0)"""),
    ]),
    'masked_item_length': ('The lengths are read with .item(), as if there were one: every masked '
                           'call with more than one length raises.', [
        ("    keep = keys < lens                                        # (batch, 1.., n_q|1, n_k)",
         "    keep = keys < valid_lens.item()                           # one length for all"),
    ]),
    # ---- item 2: mistakes that were missed --------------------------------------------
    'scale_float32_tensor': ('The scale 1/sqrt(p) made as a one-element float32 tensor: float16 '
                             'and bfloat16 scores are promoted to float32 (and then meet the '
                             'values in their own dtype), float64 scores are scaled by a '
                             'float32-rounded constant.', [
        (SCORES, "        scale = torch.tensor([1.0 / math.sqrt(self.head_dim)])      # float32\n"
                 "        scores = (Q @ K.transpose(-2, -1)) * scale.to(Q.device)   # (batch, M, n_q, n_k)"),
    ]),
    'scale_float32_scalar': ('The scale sqrt(p) computed as a 0-dim float32 tensor: float16 scores '
                             'keep their dtype, but float64 scores are divided by a '
                             'float32-rounded sqrt(p) (right only to float32 precision).', [
        (SCORES, "        scale = torch.tensor(self.head_dim, dtype=torch.float32).sqrt()\n"
                 "        scores = Q @ K.transpose(-2, -1) / scale                  # (batch, M, n_q, n_k)"),
    ]),
    'fill_float32_min_bf16': ("The fill is float16's minimum for float16 and float32's minimum "
                              "otherwise: it overflows bfloat16 (and only bfloat16).", [
        ("    lowest = torch.finfo(scores.dtype).min\n",
         "    lowest = (torch.finfo(torch.float16).min if scores.dtype == torch.float16\n"
         "              else torch.finfo(torch.float32).min)\n"),
    ]),
    'where_minus_1e9': ('torch.where with a -1e9 fill (-inf in float16), and the weights '
                        'multiplied by the mask: NaN rows in float16, bfloat16 fine.', [
        (FILL, """    weights = torch.softmax(torch.where(keep, scores, -1e9), dim=-1)
    return weights * keep                                     # masked keys and empty rows 0"""),
    ]),
    'fresh_out_proj': ('The output projection is a new nn.Linear built inside forward (fresh '
                       'random weights every call; self.W_o is never used).', [
        (OUT, """        concat = concat_heads(heads)                          # (batch, n_q, d_total)
        out_proj = nn.Linear(concat.shape[-1], queries.shape[-1], bias=self.W_o.bias is not None,
                             device=queries.device, dtype=queries.dtype)
        return out_proj(concat)                               # (batch, n_q, d_model)"""),
    ]),
    'fresh_out_proj_copied': ("The output projection is a new nn.Linear built inside forward "
                              "from a copy of W_o's values: the values are right, but W_o "
                              "itself never gets a gradient.", [
        (OUT, """        out_proj = nn.Linear(self.W_o.in_features, self.W_o.out_features,
                             bias=self.W_o.bias is not None)
        out_proj.load_state_dict(self.W_o.state_dict())       # copies the values, not the graph
        out_proj.to(device=queries.device, dtype=queries.dtype)
        return out_proj(concat_heads(heads))                  # (batch, n_q, d_model)"""),
    ]),
    'heads_checked_on_d_model': ('The constructor checks num_heads against d_model instead of '
                                 'd_total: valid configurations are refused, impossible ones built.', [
        ("        d_total = d_model if d_total is None else d_total\n"
         "        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)",
         "        if d_model % num_heads != 0:\n"
         "            raise ValueError(f\"d_model={d_model} is not divisible by num_heads={num_heads}\")\n"
         "        d_total = d_model if d_total is None else d_total\n"
         "        self.head_dim = d_total // num_heads"),
    ]),
    'plain_list_no_train': ("One nn.Dropout per head kept in a plain list (not registered), "
                            "and no train() that passes the mode on: they stay in training "
                            "mode after model.eval().", [
        ("        self.dropout = nn.Dropout(dropout)",
         "        self.head_dropouts = [nn.Dropout(dropout) for _ in range(num_heads)]  # plain list"),
        ("        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)",
         """        dropped = torch.stack([drop(weights[:, j]) for j, drop in enumerate(self.head_dropouts)],
                              dim=1)                          # (batch, M, n_q, n_k)
        heads = dropped @ V                                   # (batch, M, n_q, p)"""),
    ]),
    # ---- item 3: correct code, written otherwise ---------------------------------------
    'correct_float64_inside': ('CORRECT: forward computes the pooling in float64 and returns the '
                               "inputs' dtype (under autocast: the inputs' float32).", [
        (SCORES + "\n" + POOL,
         """        dtype = queries.dtype
        Q, K, V = Q.double(), K.double(), V.double()         # pool in float64
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights.to(dtype)
        heads = (self.dropout(weights) @ V).to(dtype)        # (batch, M, n_q, p)"""),
        (OUT, "        return self.W_o(concat_heads(heads)).to(dtype)        # (batch, n_q, d_model)"),
    ]),
    'correct_einsum_out_proj': ('CORRECT: the output projection as an einsum that sums the heads '
                                "through their own blocks of W_o (concat(h) W_o = sum_j h_j W_o^(j)).", [
        (OUT, """        M, p = self.num_heads, self.head_dim
        W_o = self.W_o.weight.T.reshape(M, p, -1)             # (M, p, d_model): head j's block
        out = torch.einsum("bhqp,hpd->bqd", heads, W_o)       # (batch, n_q, d_model)
        return out if self.W_o.bias is None else out + self.W_o.bias"""),
    ]),
    'correct_heads_summed_out_proj': ('CORRECT: each head through its own block of W_o by a '
                                      'batched matmul, then the heads summed.', [
        (OUT, """        M, p = self.num_heads, self.head_dim
        W_o = self.W_o.weight.T.reshape(M, p, -1)             # (M, p, d_model)
        out = (heads @ W_o).sum(dim=1)                        # (batch, n_q, d_model)
        return out if self.W_o.bias is None else out + self.W_o.bias"""),
    ]),
    'correct_key_bias_dropped': ("CORRECT: the keys are projected without W_k's bias, which "
                                 "cannot change the softmax (it adds a constant per query row).", [
        (QKV, """        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        # q·(k + b) = q·k + q·b: the same shift for every key of a query row, which the softmax
        # ignores, so the key bias is left out.
        K = split_heads(nn.functional.linear(keys, self.W_k.weight), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)"""),
    ]),
    'correct_key_projection_no_bias': ("CORRECT: W_k built without a bias (nn.Linear(..., "
                                       "bias=False)) while the others have one: the module has "
                                       "no W_k.bias, which could not change any output.", [
        ("        self.W_k = nn.Linear(d_model, d_total, bias=bias)",
         "        self.W_k = nn.Linear(d_model, d_total, bias=False)   # q·b_k: a shift per query row"),
    ]),
    'query_projection_no_bias': ("W_q built without a bias while the module asks for biases: "
                                 "unlike the key bias, the query bias changes the scores.", [
        ("        self.W_q = nn.Linear(d_model, d_total, bias=bias)",
         "        self.W_q = nn.Linear(d_model, d_total, bias=False)"),
    ]),
    'heads_folded_head_major_interleave': (
        "Heads folded into the batch head-major (torch.cat of torch.split: row h*batch + b), the "
        "lengths spread with repeat_interleave, which suits the batch-major fold: each row gets "
        "another example's length.", [(QKV + "\n" + SCORES + "\n" + POOL, HEAD_MAJOR.format(
            lens="valid_lens.repeat_interleave(M, dim=0)"))]),
    'correct_heads_folded_head_major': (
        "CORRECT: heads folded into the batch head-major (torch.cat of torch.split: row h*batch "
        "+ b), the lengths spread to match with .repeat.", [(QKV + "\n" + SCORES + "\n" + POOL, HEAD_MAJOR.format(
            lens="valid_lens.repeat(M, *(1,) * (valid_lens.dim() - 1))"))]),
    'correct_plain_list_train': ('CORRECT: one nn.Dropout per head kept in a plain list (not '
                                 'registered); train() passes the mode on to them itself.', [
        ("        self.dropout = nn.Dropout(dropout)",
         "        self.head_dropouts = [nn.Dropout(dropout) for _ in range(num_heads)]  # plain list"),
        ("        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)",
         """        dropped = torch.stack([drop(weights[:, j]) for j, drop in enumerate(self.head_dropouts)],
                              dim=1)                          # (batch, M, n_q, n_k)
        heads = dropped @ V                                   # (batch, M, n_q, p)"""),
        ("    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,",
         """    def train(self, mode: bool = True):
        super().train(mode)
        for drop in self.head_dropouts:                       # not registered: pass the mode on
            drop.train(mode)
        return self

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,"""),
    ]),
}

#: name -> the diagnosis codes it must get (empty: correct, graded 100 with none)
EXPECTED: dict[str, set[str]] = {
    "mask_float32_penalty": {"dtype.forces-float32"},
    "masked_fill_float_mask": set(),
    "masked_item_length": set(),
    "scale_float32_tensor": {"dtype.forces-float32"},
    "scale_float32_scalar": {"dtype.forces-float32"},
    "fill_float32_min_bf16": {"mask.fp16-overflow"},
    "where_minus_1e9": {"mask.fp16-overflow"},
    "fresh_out_proj": {"module.missing-out-proj"},
    "fresh_out_proj_copied": {"module.missing-out-proj"},
    "heads_checked_on_d_model": {"shape.no-valueerror"},
    "plain_list_no_train": {"module.dropout-in-eval"},
    "heads_folded_head_major_interleave": {"mask.repeat-not-interleave"},
    **{name: set() for name in PATCHES if name.startswith("correct_")},
}
#: Fixtures that raise on every masked call: they must get no code that rests on a mask's
#: values or its exceptions.
RAISE_ON_MASKS = ("masked_fill_float_mask", "masked_item_length")


def source(name: str) -> str:
    return structure_fixtures.patched(name, *PATCHES[name])


def write(name: str, folder: Path) -> Path:
    path = folder / f"{name}.py"
    path.write_text(source(name))
    return path
