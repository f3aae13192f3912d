"""The SPEC's JSON result, every string passed through ``clean``."""
from __future__ import annotations

import json

from .clean import clean


HELP = "the result object of docs/contract.md"   #: what ``grade --format`` says of this format


def render(report) -> str:
    return json.dumps(_cleaned(report.to_dict()), indent=2, ensure_ascii=True) + "\n"


def _cleaned(value):
    if isinstance(value, dict):
        return {clean(k): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    return clean(value) if isinstance(value, str) else value
