"""Per-student variants: the sizes a student's notebook asks about, and their hidden checks' seed.

Every student gets their own sizes in the notebook's worked examples and numeric questions,
and their own random inputs in the hidden checks, so that answers do not travel from one
student to another. A variant is derived from the student's id and the course's secret with
HMAC-SHA256: the same two always give the same variant (a regrade gives the same result),
and without the secret nobody can work out another student's numbers.

The secret is the course's and is never released: it lives in the course's
``nbgrader_config.py`` (``c.TrustedGrades.variant_secret``) or in the environment
(``MHA_VARIANT_SECRET``). Without a secret, or without a student id, the variant is
``DEFAULT``: the numbers of the notebook that ``nbgrader generate_assignment`` releases, and
the grader's own seed. Pure functions of plain data; no torch.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

ENV = "MHA_VARIANT_SECRET"      #: the environment variable that may hold the course's secret

#: The sizes each variant picks from (each list holds only sizes that fit its question).
EXAMPLE_SIZES = [(d, m) for d in (256, 384, 512, 640, 768, 1024) for m in (4, 8, 16) if d % m == 0]
EXAMPLE_TOKENS = (10, 12, 16, 20, 24, 32, 48, 64)
KEY_SIZES = [(d, dt, m) for d in range(48, 481, 12)
             for dt in (d // 2, d, 2 * d) for m in (2, 3, 4, 5, 6, 8, 10, 12)
             if dt % m == 0 and dt // m not in (d, dt) and dt // m >= 4]
PARAM_SIZES = [(d, m) for d in range(48, 1025, 16) for m in (2, 4, 6, 8, 12, 16)
               if d % m == 0 and d // m >= 8]


@dataclass(frozen=True)
class Variant:
    """One student's numbers. ``seed`` None: the grader's own seed (the default variant)."""

    student: str | None
    example_d: int          #: worked examples of sections 1 and 6: d (= d_total) ...
    example_heads: int      #: ... M ...
    example_n: int          #: ... and n, the number of tokens (self-attention, n_q = n_k = n)
    key_d: int              #: question 1: d, d_total (D2L's d_h) and M
    key_d_total: int
    key_heads: int
    param_d: int            #: question 2: d and M
    param_heads: int
    seed: int | None = field(default=None)

    def answers(self) -> dict[str, object]:
        """The right answers to the numeric questions, by the name of the answer function."""
        return {"key_matrix_shape": (self.key_d, self.key_d_total // self.key_heads),
                "params_many_heads": 3 * self.param_heads * self.param_d * (self.param_d // self.param_heads),
                "params_one_head": 3 * self.param_d * self.param_d}

    def values(self) -> dict[str, str]:
        """The placeholder values of the notebook's text (``<<name>>`` in ``narrative``)."""
        cost = cost_figures(self.example_d, self.example_n, self.example_heads)
        return {"ex_d": str(self.example_d), "ex_heads": str(self.example_heads),
                "ex_n": str(self.example_n), "ex_p": str(self.example_d // self.example_heads),
                "key_d": str(self.key_d), "key_d_total": str(self.key_d_total),
                "key_heads": str(self.key_heads),
                "param_d": str(self.param_d), "param_heads": str(self.param_heads),
                "param_p": str(self.param_d // self.param_heads),
                **{f"ex_{name}": f"{value:,}".replace(",", r"\,") for name, value in cost.items()},
                **{f"answer_{name}": repr(value) for name, value in self.answers().items()}}


DEFAULT = Variant(student=None, example_d=512, example_heads=8, example_n=20,
                  key_d=96, key_d_total=96, key_heads=6, param_d=128, param_heads=4)


def cost_figures(d: int, n: int, heads: int) -> dict[str, int]:
    """Cost of one forward pass of self-attention (batch 1, n tokens, d_total = d), with
    ``heads`` heads of width d / heads and with one head of width d. FLOPs are counted as
    torch.utils.flop_counter does: 2 per multiply-add of a matrix product."""
    return {"params": 4 * d * d,                        # W_q, W_k, W_v, W_o: the same either way
            "params_role": d * d,                       # one role: M·d·(d/M) = d·d
            "proj_flops": 4 * 2 * n * d * d,            # Q, K, V and the output projection
            "score_flops": 2 * 2 * n * n * d,           # QKᵀ and weights·V, over all heads
            "flops": 8 * n * d * d + 4 * n * n * d,     # all the matrix products
            "softmax_many": heads * n * n,              # entries the softmax runs on, M heads
            "softmax_one": n * n}                       # ... one head of width d


def derive(student: str | None, secret: str | None) -> Variant:
    """The variant of ``student`` under the course's ``secret``; DEFAULT without either."""
    if student is None or not secret:
        return DEFAULT if student is None else replace(DEFAULT, student=str(student))
    student = str(student).strip()
    mac = hmac.new(secret.encode(), b"mha-variant\0" + student.encode(), hashlib.sha256).digest()

    def pick(options, index: int):
        return options[int.from_bytes(mac[4 * index:4 * index + 4], "big") % len(options)]

    ex_d, ex_m = pick(EXAMPLE_SIZES, 0)
    key = pick(KEY_SIZES, 2)
    param = pick(PARAM_SIZES, 3)
    return Variant(student=student, example_d=ex_d, example_heads=ex_m,
                   example_n=pick(EXAMPLE_TOKENS, 1), key_d=key[0], key_d_total=key[1],
                   key_heads=key[2], param_d=param[0], param_heads=param[1],
                   seed=int.from_bytes(mac[-4:], "big") & 0x7FFFFFFF)


class SecretError(Exception):
    """The course's secret could not be read; the message says from where and why."""


def secret_from(*, value: str | None = None, config: str | os.PathLike | None = None) -> str:
    """The course's secret: ``value`` if given, else ``TrustedGrades.variant_secret`` of the
    nbgrader config file ``config``, else the environment's ``MHA_VARIANT_SECRET``, else ""."""
    if value:
        return value
    if config is not None:
        return _from_config(Path(config))
    return os.environ.get(ENV, "")


def _from_config(path: Path) -> str:
    """Read ``c.TrustedGrades.variant_secret`` from an nbgrader config file (it runs the file,
    as nbgrader does: it is the course's own)."""
    if not path.is_file():
        raise SecretError(f"{path}: no such course config file")
    try:
        from traitlets.config.loader import PyFileConfigLoader
        config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    except ImportError as e:
        raise SecretError(f"reading {path} needs traitlets (pip install nbgrader): {e}") from None
    except Exception as e:          # the course's config raised: say so, do not crash
        raise SecretError(f"{path} could not be read: {type(e).__name__}: {e}") from None
    secret = config.get("TrustedGrades", {}).get("variant_secret", "")
    return secret if isinstance(secret, str) else ""
