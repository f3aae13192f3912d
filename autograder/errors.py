"""The command line's exit statuses and the two exceptions that choose one.

The status follows the exception's type, never its base class alone: a command raises
:class:`UsageError` for what the person running it can fix (a missing file, a bad
option, a rubric that does not parse), and :class:`GraderFailure` for a failure of the
grader that it recognises (its sandbox would not start, its own files changed). Anything
else that escapes a command is a bug in the grader and exits with ``EXIT_GRADER`` too,
with its traceback for the bug report. This module imports nothing of the project, so
every layer may use it.
"""
from __future__ import annotations

EXIT_OK = 0            #: grading ran, whatever the score
EXIT_GRADER = 1        #: the grader itself failed (or, for batch and audit, on some submission)
EXIT_USAGE = 2         #: the command line, a file it names or an option was wrong
EXIT_INTERRUPTED = 130  #: Ctrl-C (128 + SIGINT, as shells report it)
EXIT_PIPE_CLOSED = 141  #: the reader of stdout went away (128 + SIGPIPE, as shells report it)


class UsageError(ValueError):
    """A problem the user can fix; the message says how. Exit status 2.

    A ValueError, so that code which caught the ValueError raised here before (an option
    the Grader refuses, say) keeps working."""


class GraderFailure(RuntimeError):
    """The grader failed in a way it recognises; the message says what. Exit status 1."""
