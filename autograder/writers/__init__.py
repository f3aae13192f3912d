"""Writers render a finished Report; they do no grading."""
from __future__ import annotations

from . import gradescope, json_writer, junit, text

WRITERS = {"text": text.render, "json": json_writer.render, "gradescope": gradescope.render,
           "junit": junit.render}
