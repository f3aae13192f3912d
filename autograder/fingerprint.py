"""A cheap, exact key for a request or a question: what the reference's answers are cached
by (``api``'s reference cache, ``carry.Answers``)."""
from __future__ import annotations

import hashlib

import torch

from .sandbox.protocol import NUMPY_DTYPES, numpy_of


def fingerprint(value) -> str:
    """A cheap, exact key for a request: shapes and bytes of tensors, reprs of the rest."""
    h = hashlib.blake2b(digest_size=16)

    def walk(v):
        if isinstance(v, torch.Tensor):
            h.update(str((v.dtype, tuple(v.shape))).encode())
            if v.dtype in NUMPY_DTYPES and v.device.type == "cpu" and v.is_contiguous():
                h.update(numpy_of(v))          # its memory as it is: C order already
            else:
                h.update(numpy_of(v.contiguous().reshape(-1).view(torch.uint8)))
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(str(k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(b"[" if isinstance(v, list) else b"(")      # a tuple is not a list
            for x in v:
                walk(x)
            h.update(b"]" if isinstance(v, list) else b")")
        else:
            h.update(repr(v).encode())
    walk(value)
    return h.hexdigest()
