"""Shared test setup: the repository on sys.path, fixed seeds, the ``cuda`` marker."""
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:                 # plain `pytest` (not `python -m pytest`) from anywhere
    sys.path.insert(0, str(ROOT))


def pytest_configure(config):
    """Register the markers here too, for runs that do not read pyproject.toml."""
    known = {line.split(":")[0].strip() for line in config.getini("markers")}
    for marker, text in [("cuda", "needs a CUDA device (skipped without one)"),
                         ("slow", "end-to-end tests that take tens of seconds")]:
        if marker not in known:
            config.addinivalue_line("markers", f"{marker}: {text}")


@pytest.fixture(autouse=True)
def fixed_seeds():
    """Every test starts from the same random state."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
