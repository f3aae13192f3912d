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


@pytest.fixture(scope="module")
def make_grader(tmp_path_factory):
    """``make_grader(**options)``: an ``autograder.api.Grader`` for this test module, one per
    distinct options, closed when the module's tests are done. The options are the Grader's
    (``seed``, ``device``, ``public_only``, ``rules``, ``memory_bytes``, ``rubric``) and two
    more: ``timeouts``, a dict that updates the Grader's, and ``rubric_text``, a rubric's TOML
    (written to a file, given as ``rubric``)."""
    from autograder import api
    made = {}

    def make(*, timeouts=None, rubric_text=None, **options):
        key = (repr(sorted((timeouts or {}).items())), rubric_text, repr(sorted(options.items())))
        if key not in made:
            if rubric_text is not None:
                options["rubric"] = tmp_path_factory.mktemp("rubric") / "rubric.toml"
                options["rubric"].write_text(rubric_text)
            grader = api.Grader(**options)
            grader.timeouts.update(timeouts or {})
            made[key] = grader
        return made[key]

    yield make
    for grader in made.values():
        grader.close()


@pytest.fixture(scope="module")
def grader(request, make_grader):
    """The test module's grader: ``make_grader(**GRADER)``, ``GRADER`` the module's options
    (the seed at least, so that a failure replays)."""
    options = getattr(request.module, "GRADER", None)
    if options is None:
        pytest.fail(f"{request.module.__name__} uses the grader fixture: give it GRADER = "
                    "{'seed': N, ...}, the options of make_grader", pytrace=False)
    return make_grader(**options)
