"""Writers render a finished Report; they do no grading.

The registry: each writer module has ``render(report) -> str`` and ``HELP`` (one phrase for
``grade --format``); :data:`WRITERS` and :data:`HELP` are read from :data:`MODULES`, and the
command line takes its ``--format`` choices from them, so a new format is one module and one
entry here (docs/extending.md).
"""
from __future__ import annotations

from . import gradescope, json_writer, junit, text

#: format name -> writer module, in the order ``--format`` lists them
MODULES = {"text": text, "json": json_writer, "gradescope": gradescope, "junit": junit}
WRITERS = {name: module.render for name, module in MODULES.items()}
HELP = {name: module.HELP for name, module in MODULES.items()}
