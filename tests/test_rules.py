"""The code rules (``autograder/sandbox/rules.py``): what graded code may use.

Each reach below is refused, wherever it is written and however the name is built: read in
the syntax (``rules.analyse``, reported before anything runs) or refused by the guard while
the code runs (``RuleError`` at that line). Each ordinary idiom runs as written. The rules
are run here in the test's own process; ``test_forged_facts`` grades attacks through the
sandbox.
"""
from __future__ import annotations

import sys
import textwrap
import types

import pytest
import torch

from autograder import source_facts
from autograder.sandbox import guard, rules

guard.preload()


def run(code: str) -> types.ModuleType:
    """``code`` compiled under the rules and run as a module of its own, ``mha`` (as the
    sandbox's worker does); its guard is ``module.guard`` (kept outside its namespace)."""
    module = types.ModuleType("mha")
    saved = sys.modules.get("mha")
    sys.modules["mha"] = module
    try:
        GUARDS[id(module)] = guard.load(textwrap.dedent(code).encode(), "mha.py", module)
    finally:
        if saved is None:
            sys.modules.pop("mha", None)
        else:
            sys.modules["mha"] = saved
    return module


GUARDS: dict = {}


def broken(module) -> list[str]:
    return GUARDS[id(module)].broken


#: name -> code whose running (or, where it defines ``f``, whose f()) breaks a rule
REFUSED = {
    "sys.modules": "import sys\nm = sys.modules['probes']\n",
    "frames": "import sys\nf = sys._getframe(1)\n",
    "a traceback's frame": ("def f():\n    try:\n        raise ValueError\n"
                            "    except ValueError as e:\n        return e.__traceback__\n"),
    "a generator's frame": "def f():\n    g = (x for x in [1])\n    return g.gi_frame\n",
    "gc": "import gc\ngc.get_objects()\n",
    "ctypes": "from ctypes import CDLL\nCDLL(None)\n",
    "inspect": "import inspect as i\ni.currentframe()\n",
    "exec": "exec('x = 1')\n",
    "eval through a name": "e = eval\n",
    "compile": "def f():\n    return compile('1', 'x', 'eval')\n",
    "__import__": "t = __import__('torch')\n",
    "importlib": "import importlib\nimportlib.import_module('probes')\n",
    "the builtins through globals()": "x = globals()['__builtins__']\n",
    "a private name through vars()": "import torch\nv = vars(torch)['_C']\n",
    "monkeypatch through vars()": "import torch\nvars(torch)['equal'] = None\n",
    "the guard through globals()": "g = globals()\ng.update(__rules_get__=getattr)\n",
    "private torch": "import torch\nm = torch._C\n",
    "private torch by getattr": "import torch\nm = getattr(torch, '_' + 'C')\n",
    "private torch by reduce": ("import functools, torch\n"
                                "m = functools.reduce(getattr, ['_C', '_get_dispatch_mode'], torch)\n"),
    "private name from an import": "from torch import _C\n",
    "a private attribute of torch's objects": "import torch\nv = torch.ones(1)._version\n",
    "torch.ops": "import torch\nf = torch.ops.aten.mm\n",
    "torch.library": "import torch.library as L\nL.Library('aten', 'IMPL')\n",
    "torch.utils": "import torch\nd = torch.utils._python_dispatch\n",
    "a module held by torch": "import torch\nm = torch.sys.modules\n",
    "a module held by F": "import torch.nn.functional as F\nm = F.importlib\n",
    "sys through os": "import os\nm = os.sys.modules\n",
    "torch.load (pickles)": "import torch\ntorch.load('/tmp/x.pt')\n",
    "numpy.load": "import numpy as np\nnp.load('/tmp/x.npy', allow_pickle=True)\n",
    "ndarray.ctypes": "import numpy as np\nc = np.ones(2).ctypes\n",
    "typing.get_type_hints": "import typing\ntyping.get_type_hints(int)\n",
    "operator.attrgetter": "import operator\ng = operator.attrgetter('_C')\n",
    "monkeypatch": "import torch\ntorch.equal = lambda a, b: True\n",
    "monkeypatch by setattr": "import torch\nsetattr(torch, 'equal', None)\n",
    "monkeypatch a class": "import torch\ntorch.Tensor.__eq__ = None\n",
    "monkeypatch a torch class's method": "from torch import nn\nnn.Module.parameters = None\n",
    "monkeypatch through an alias": "import torch\nT = torch\nT.isfinite = None\n",
    "monkeypatch through a container": "import torch\nbox = [torch]\nbox[0].equal = None\n",
    "monkeypatch through a function": "import torch\ndef patch(m):\n    m.equal = None\npatch(torch)\n",
    "deleting from torch": "import torch\ndel torch.equal\n",
    "builtins": "import builtins\nbuiltins.isinstance = None\n",
    "__builtins__": "x = __builtins__\n",
    "subclasses": "x = object.__subclasses__()\n",
    "object.__setattr__": "import torch\nobject.__setattr__(torch, 'x', 1)\n",
    "a function's globals": "import torch\ng = torch.nn.Module.__init__.__globals__\n",
    "a bound method's self": "import torch\nm = torch.randn.__self__\n",
    "a tensor class with torch's hooks, built by type()": (
        "import torch\nX = type('X', (torch.Tensor,), "
        "{'__torch_function__': classmethod(lambda *a, **k: 0)})\n"),
    "a metaclass": "class Meta(type):\n    pass\nclass E(metaclass=Meta):\n    pass\n",
    "__torch_function__": ("import torch\nclass T(torch.Tensor):\n    @classmethod\n"
                           "    def __torch_function__(cls, f, t, a=(), k=None):\n        return 0\n"),
    "__getattribute__": "class A:\n    def __getattribute__(self, name):\n        return 1\n",
    "__init_subclass__": "class A:\n    def __init_subclass__(cls):\n        pass\n",
    "match with class patterns": ("import torch\ndef f():\n    match torch:\n"
                                  "        case object(_C=c):\n            return c\n"),
    "a relative import": "from . import probes\n",
    "the sandbox's modules": "import worker\nworker.FORBIDDEN_HITS.clear()\n",
    "assigning __name__": "__name__ = '__main__'\n",
    "sys.path is a copy, sys.meta_path is refused": "import sys\nsys.meta_path.clear()\n",
    "torch.cuda's sync mode": "import torch\ntorch.cuda.set_sync_debug_mode(0)\n",
    "global module hooks": "import torch\ntorch.nn.modules.module.register_module_forward_hook(print)\n",
    "a private attribute of a torch layer": "import torch\np = torch.nn.Linear(2, 2)._parameters\n",
    # round 4: names that are not exact strings, the attribute machinery, metaclasses
    "a str subclass as a name": ("import torch\nclass S(str):\n"
                                 "    def startswith(self, *a):\n        return False\n"
                                 "    def __eq__(self, o):\n        return True\n"
                                 "    def __hash__(self):\n        return hash('_C')\n"
                                 "m = getattr(torch, S('_C'))\n"),
    "a str subclass as a namespace key": (
        "import torch\nclass S(str):\n    def startswith(self, *a):\n        return False\n"
        "m = vars(torch)[S('_C')]\n"),
    "a lookalike namespace key": (
        "import torch\nclass K:\n    def __eq__(self, o):\n        return True\n"
        "    def __hash__(self):\n        return hash('_C')\nm = vars(torch)[K()]\n"),
    "Python's __getattribute__ off one's own class": (
        "import torch\nclass A:\n    pass\nm = A.__getattribute__(torch, '_C')\n"),
    "nn.Module.__setattr__ on a torch layer": (
        "import torch\nlin = torch.nn.Linear(2, 2)\n"
        "torch.nn.Module.__setattr__(lin, '_parameters', {})\n"),
    "super() of a class": ("import torch\nclass M(torch.nn.Module):\n    pass\n"
                           "super(M, M).__setattr__(torch.nn.Linear(2, 2), '_parameters', {})\n"),
    "super().__setattr__ with nn.Module's names": (
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        super().__setattr__('_parameters', {})\nM()\n"),
    "__call__ of a foreign class": "import torch\nc = torch.nn.Linear.__call__\n",
    "type(name, bases, ns)": "X = type('X', (), {})\n",
    "type(x) giving a metaclass": "import abc\nM = type(abc.ABC)\nX = M('X', (), {})\n",
    "a metaclass called from its module": "import abc\nX = abc.ABCMeta('X', (type,), {})\n",
    "a metaclass under another name": "import typing_extensions as t\nX = t.GenericMeta('X', (), {})\n",
    "a class's __class__": "import abc\nX = abc.ABC.__class__('X', (), {})\n",
    "an own metaclass named ABCMeta": (
        "class ABCMeta(type):\n    pass\ndef f():\n    class X(metaclass=ABCMeta):\n"
        "        pass\n"),
    "a metaclass derived from abc's": "import abc\nclass M(abc.ABCMeta):\n    pass\n",
    "os.write to another fd": "import os\nos.write(5, b'x')\n",
    "update_wrapper with assigned=": (
        "import functools, torch\ndef g():\n    pass\n"
        "functools.update_wrapper(g, torch.nn.Linear(2, 2), assigned=('_parameters',))\n"),
    "wraps with updated=": ("import functools, torch\ndef g():\n    pass\n"
                            "functools.wraps(torch.nn.Linear, updated=('__dict__',))(g)\n"),
    "update_wrapper on a foreign function": (
        "import functools, torch\ndef g():\n    pass\n"
        "functools.update_wrapper(torch.nn.functional.relu, g)\n"),
    "a dataclass field with a dunder name": (
        "from dataclasses import dataclass\n@dataclass\nclass A:\n    __weakref__: int = 0\n"),
    "a dataclass field of nn.Module's": (
        "from dataclasses import dataclass\nimport torch\n@dataclass(eq=False)\n"
        "class A(torch.nn.Module):\n    _parameters: dict = None\n"),
    "str.format reading a dunder": "def f():\n    return '{0.__init__.__globals__}'.format(f)\n",
    "str.format unbound": "def f():\n    return str.format('{0._parameters}', f)\n",
    "format_map": "def f():\n    return '{x.__init__.__globals__}'.format_map({'x': f})\n",
    "format through vars(str)": (
        "def f():\n    return vars(str)['format']('{0.__init__.__globals__}', f)\n"),
    "a nested format spec": "def f():\n    return '{0:{1.__globals__}}'.format(1, f)\n",
    "logging's { style": ("import logging\n"
                          "h = logging.Formatter('{msg.__init__.__globals__}', style='{')\n"),
    "typing_extensions.get_annotations": (
        "import typing_extensions as t\ndef f(x: 'g()'):\n    pass\n"
        "a = t.get_annotations(f, eval_str=True)\n"),
    "__array_function__": "class A:\n    def __array_function__(self, *a):\n        return 0\n",
    "__array_ufunc__ set in a class body": "class A:\n    __array_ufunc__ = None\n",
    "a walrus binding the guard's name": "(__rules_get_private__ := len)\n",
    "the guard's name bound in a function": (
        "import torch\ndef f():\n    __rules_get_private__ = lambda o, n: None\n"
        "    return torch._C\n"),
    "a class hook bound by a walrus in the class body": (
        "class A:\n    (__reduce__ := print)\n"),
    "the guard's name bound in a class body": (
        "class A:\n    __rules_set__ = print\n"),
    "an except clause binding a dunder": (
        "try:\n    pass\nexcept Exception as __builtins__:\n    pass\n"),
    "a with target binding a dunder": (
        "import torch\nwith torch.no_grad() as __builtins__:\n    pass\n"),
    "a stream's raw file": "import sys\nf = type(sys.stdout.buffer)\n",
    "a handler's raw file": "import logging\nf = logging.StreamHandler().stream.buffer\n",
    "logging.FileHandler": "import logging\nh = logging.FileHandler('/tmp/x.log')\n",
    "logging.basicConfig(filename=)": "import logging\nlogging.basicConfig(filename='/tmp/x')\n",
    "torch.from_file": "import torch\nt = torch.from_file('/etc/hostname', size=1)\n",
    "nn.Module's machinery on one's own module": (
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self._parameters = {}\nM()\n"),
}

#: The reaches the syntax shows (the report lists them before anything runs); the others only
#: running shows (a name built at run time, an alias, a module held by another module).
STATIC = {'ndarray.ctypes', '__builtins__', '__getattribute__', '__import__', '__init_subclass__', '__torch_function__', "a bound method's self", "a function's globals", "a generator's frame", 'a metaclass', 'a relative import', "a traceback's frame", 'assigning __name__', 'compile', 'eval through a name', 'exec', 'match with class patterns', 'monkeypatch a class', 'private name from an import', 'subclasses', 'vars of a module',
          '__array_function__', '__array_ufunc__ set in a class body',
          "a walrus binding the guard's name", "the guard's name bound in a function",
          "the guard's name bound in a class body", 'an except clause binding a dunder',
          'a with target binding a dunder', 'a class hook bound by a walrus in the class body'}


def run_refused(name: str) -> str:
    """The rule the code breaks: at import (the statement is left out, the module goes on,
    the guard notes it) or when f() runs (it raises)."""
    module = run(REFUSED[name])
    if broken(module):
        return broken(module)[0]
    with pytest.raises(rules.RuleError) as refused:
        module.f()
    return str(refused.value)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_reach_is_refused_at_its_line(name):
    message = run_refused(name)
    assert message.startswith("line ") and "code rule" in message, message


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_syntax_shows_is_read_before_anything_runs(name):
    tree = rules.without_main(__import__("ast").parse(REFUSED[name]))
    assert bool(rules.analyse(tree)) == (name in STATIC), (name, rules.analyse(tree))


def test_the_guard_names_the_line_and_the_rule_and_the_module_goes_on():
    """A top-level statement that breaks a rule is left out, the rest runs (as a notebook goes
    on past a failing cell); a function that breaks one raises at its line."""
    module = run("import torch\n\n\ntorch.load('x')\nafter = 1\n"
                 "def f():\n    return torch.load('y')\n")
    assert module.after == 1
    assert broken(module) and broken(module)[0].startswith("line 4: ") \
        and "torch.load" in broken(module)[0] and "code rule 1" in broken(module)[0]
    with pytest.raises(rules.RuleError, match=r"^line 7: "):
        module.f()


#: Ordinary code, each idiom a way correct submissions are written: all of it runs.
ORDINARY = '''
"""A module's docstring comes first, then its __future__ import."""
from __future__ import annotations

import copy
import functools
import logging
import math
import operator
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import functional
import matplotlib.pyplot as plt          # not available to graded code: a placeholder
import einops                            # maybe not installed: a placeholder then

random.seed(0)
np.random.seed(0)
torch.manual_seed(0)
logger = logging.getLogger(__name__)
__all__ = ["MultiHeadAttention"]
DEBUG = os.environ.get("MHA_DEBUG", "") == "1"
sys.path.append("..")


class Kind(Enum):
    SELF = 1


@dataclass
class Sizes:
    d: int
    shape: tuple = field(default_factory=tuple)


@torch.jit.script
def scale(x: Tensor, p: int) -> Tensor:
    return x / math.sqrt(p)


class Base(nn.Module):
    __constants__ = ["num_heads"]

    def __init__(self, num_heads):
        nn.Module.__init__(self)
        self.num_heads = num_heads


class MultiHeadAttention(Base):
    def __init__(self, d_model, num_heads):
        super().__init__(num_heads)
        for role in ("q", "k", "v", "o"):
            setattr(self, f"W_{role}", nn.Linear(d_model, d_model))
        self._head_dim = d_model // num_heads
        self.calls = 0
        self.norm, self.count = None, 0
        self._reset_parameters()

    def _reset_parameters(self):
        for layer in (self.W_q, self.W_k):
            nn.init.xavier_uniform_(layer.weight)

    def reset_parameters(self):
        self._reset_parameters()

    def train(self, mode: bool = True):
        super().train(mode)
        return self

    def extra_repr(self) -> str:
        return f"{type(self).__name__} {self.__class__.__name__} {self.num_heads}"

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        self.calls += 1
        for self.count in range(2):
            pass
        q = getattr(self, "W_" + "q")(x)
        torch._assert(q.dim() == 3, "3-d")
        b, n, _ = q.shape
        h, p = self.num_heads, self._head_dim
        q = q.reshape(b, n, h, p).transpose(1, 2)
        scores = scale(q @ q.transpose(-2, -1), p)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = F.softmax(scores, dim=-1)
        weights = functional.dropout(weights, 0.0, training=self.training)
        out = (weights @ q).transpose(1, 2).reshape(b, n, h * p)
        size = functools.reduce(operator.mul, out.shape)
        assert size == out.numel(), f"{out.shape=}"
        return self.W_o(out)


def clones(module, n):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


model = torch.compile(MultiHeadAttention(8, 2))
for _name in ("clones",):
    globals()[_name] = functools.wraps(globals()[_name])(globals()[_name])
names = sorted(vars())
ok = model(torch.randn(1, 3, 8)).shape == (1, 3, 8)
warnings.filterwarnings("ignore")


def timed():                             # a clock is not available to graded code: only
    return time.time()                   # calling this would raise

if __name__ == "__main__":
    import traceback
    sys.path.insert(0, ".")
    try:
        eval("1")
        print(sys._getframe())
    except Exception:
        traceback.print_exc()
'''


def test_ordinary_code_runs_under_the_rules():
    module = run(ORDINARY)
    assert module.ok is True
    assert isinstance(module.model, torch.nn.Module)
    m = module.MultiHeadAttention(8, 2)
    assert m.calls == 0 and m._head_dim == 4
    m(torch.randn(2, 3, 8))
    assert m.calls == 1 and m.count == 1
    assert rules.analyse(rules.without_main(__import__("ast").parse(ORDINARY))) == []


def test_a_placeholder_imports_and_refuses_only_when_used():
    module = run("import matplotlib.pyplot as plt\nfrom sklearn import metrics\n"
                 "def draw():\n    plt.plot([1, 2])\n")
    with pytest.raises(rules.RuleError, match="matplotlib.pyplot.plot is not available"):
        module.draw()


def test_the_main_block_never_runs_and_is_not_read():
    module = run("x = 1\nif __name__ == '__main__':\n    import gc\n    x = gc.collect()\n")
    assert module.x == 1


def test_stores_keep_their_meaning():
    """Attribute assignments the guard sees: augmented (in place on a tensor), unpacked,
    chained, in loop and with targets."""
    module = run('''
        import torch
        class A:
            pass
        a, b = A(), A()
        t = torch.zeros(2)
        a.t = t
        a.t += 1                 # in place: t itself changes
        a.x, (b.y, *a.rest) = 1, (2, 3, 4)
        a.p = b.q = 5
        for a.i in range(3):
            pass
        with open_none() if False else torch.no_grad() as a.ctx:
            pass
        del b.q
    ''')
    a, b = module.a, module.b
    assert module.t.tolist() == [1.0, 1.0] and a.t is module.t
    assert (a.x, b.y, a.rest, a.p, a.i) == (1, 2, [3, 4], 5, 2)
    assert not hasattr(b, "q")


def test_sys_path_and_os_environ_are_copies():
    module = run("import os, sys\nsys.path.insert(0, '/tmp/planted')\n"
                 "os.environ['X_PLANTED'] = '1'\n")
    import os
    import sys
    assert "/tmp/planted" not in sys.path and "X_PLANTED" not in os.environ
    assert module is not None


def test_torch_attention_is_noted_not_refused():
    module = types.ModuleType("mha")
    watch = guard.load(b"import torch\nf = getattr(torch.nn.functional, "
                       b"'scaled_dot_product_attention')\nM = torch.nn.MultiheadAttention\n",
                       "mha.py", module)
    assert sorted(watch.forbidden) == ["torch.nn.MultiheadAttention",
                                       "torch.nn.functional.scaled_dot_product_attention"]


#: torch's attention reached without its name in the code (names built from pieces): each way
#: is refused by the rules (a module graded code may not have, a dunder) or noted by kind.
ATTENTION_BY_PIECES = {
    "torch.ao by getattr": "import torch\nq = getattr(torch, 'a' + 'o')\n",
    "torch.nn.attention by getattr": "import torch\nq = getattr(torch.nn, 'atten' + 'tion')\n",
    "the quantizable package": "import torch\nq = getattr(torch.nn, 'quanti' + 'zable')\n",
    "torch.nn.modules": "import torch\nq = getattr(torch.nn, 'mod' + 'ules')\n",
    "importlib": ("import importlib\n"
                  "q = importlib.import_module('torch.a' + 'o.nn.quantizable')\n"),
    "SDPA by getattr": ("from torch.nn import functional as F\n"
                        "f = getattr(F, 'scaled_dot_' + 'product_attention')\n"),
    "the higher-order operator": ("import torch\n"
                                  "f = getattr(getattr(torch, 'o' + 'ps'), 'higher_order')\n"),
    "subclasses of nn.MultiheadAttention": (
        "import torch\nM = getattr(torch.nn, 'Multihead' + 'Attention')\n"
        "s = getattr(M, '__sub' + 'classes__')()\n"),
    "subclasses through type": (
        "import torch\nM = getattr(torch.nn, 'Multihead' + 'Attention')\n"
        "s = type.__subclasses__(M)\n"),
}


@pytest.mark.parametrize("name", sorted(ATTENTION_BY_PIECES))
def test_library_attention_by_pieces_is_refused_or_noted(name):
    """However a way to torch's attention is spelled, the guard refuses it (a rule broken) or
    notes what it reached by kind (the quantizable MultiheadAttention included): none is
    reached unseen, though the names are built from pieces the reader cannot see."""
    code = ATTENTION_BY_PIECES[name]
    assert source_facts.read(code.encode()).forbidden == ()         # the reader sees nothing
    module = types.ModuleType("mha")
    watch = guard.load(code.encode(), "mha.py", module)
    assert watch.broken or watch.forbidden, name
    for value in vars(module).values():
        reached = value if isinstance(value, (list, tuple)) else [value]
        for item in reached:
            assert not guard.is_attention_class(item) or watch.forbidden, (name, item)


def test_torch_attention_is_known_by_kind():
    """The quantizable and quantized MultiheadAttention, flex_attention and the operator behind
    it are torch's attention by identity; a subclass made later, by kind."""
    import torch.ao.nn.quantizable as quantizable
    names = set(guard.forbidden_attention().values())
    assert {"torch.nn.MultiheadAttention", "torch.ao.nn.quantizable.MultiheadAttention",
            "torch.ao.nn.quantized.MultiheadAttention",
            "torch.nn.attention.flex_attention.flex_attention"} <= names, names
    assert any(n.endswith("higher_order_ops.flex_attention.flex_attention") for n in names)

    class Later(quantizable.MultiheadAttention):
        pass
    assert guard.forbidden_name(Later) == "torch.ao.nn.quantizable.MultiheadAttention"
    assert guard.forbidden_name(torch.nn.Linear) is None


def test_only_utf8_is_compiled():
    """A coding line naming another encoding is refused (the code a utf-7 line hides is never
    decoded as code); UTF-8's own declaration is fine."""
    hidden = b"# -*- coding: utf-7 -*-\nx = 1 # +AAo-import gc\n"
    with pytest.raises(ValueError, match="utf-7"):
        rules.source_text(hidden)
    assert rules.source_text(b"# -*- coding: utf-8 -*-\nx = 1\n").startswith("# -*-")


def test_the_reader_reads_a_py_file_whole():
    """A line that looks like a notebook's cell marker, in a string, splits nothing: the reader
    reads what the worker compiles (round 3, c05)."""
    code = ('import torch\nimport torch.nn.functional as F\nNOTE = """\n# --- notes ---\n"""\n'
            'y = F.scaled_dot_product_attention\nimport sys\nm = sys.modules\n')
    facts = source_facts.read(code.encode())
    assert [f.what for f in facts.forbidden] == ["torch.nn.functional.scaled_dot_product_attention"]


@pytest.mark.parametrize("code", [
    "import torch\ny = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
    "from torch.nn.functional import scaled_dot_product_attention as a\n",
    "import torch.nn.functional as F\ng = F.scaled_dot_product_attention\n",
    "from torch import nn\nm = nn.MultiheadAttention(4, 2)\n",
    "import torch\nf = getattr(torch.nn.functional, 'scaled_dot_product_attention')\n",
    "x = q.scaled_dot_product_attention\n",
    "from torch.nn.attention.flex_attention import flex_attention\n",
    "import torch\nm = torch.ao.nn.quantizable.MultiheadAttention(4, 2)\n",
    "from torch import nn\nlayer = nn.TransformerEncoderLayer(8, 2)\n",
])
def test_the_reader_sees_forbidden_built_ins_however_named(code):
    assert source_facts.read(code).forbidden


@pytest.mark.parametrize("code", [
    "class MultiHeadAttention:\n    pass\n",
    "def attention_pool(q, k, v):\n    return q\nself_attention = 1\n",
    "import torch\nif __name__ == '__main__':\n    ref = torch.nn.MultiheadAttention(4, 2)\n",
    "# torch.nn.functional.scaled_dot_product_attention is not allowed here\nx = 1\n",
])
def test_the_reader_sees_no_forbidden_built_in_in_ones_own_names_comments_or_self_test(code):
    assert source_facts.read(code).forbidden == ()


#: The idioms the round-4 rules touch, used as correct code uses them: all of it runs.
HONEST_MACHINERY = '''
import abc
import copy
import dataclasses
import enum
import functools
import logging
import os
import typing

import torch
from torch import nn


class Sized(abc.ABC):
    @abc.abstractmethod
    def size(self): ...


class Meta(metaclass=abc.ABCMeta):
    pass


class Kind(enum.Enum):
    SELF = 1


@dataclasses.dataclass(frozen=True)
class Sizes:
    d: int
    _cache: int = 0


class Shape(typing.NamedTuple):        # typing's machinery adds __match_args__: not ours
    n: int


class HasSize(typing.Protocol):        # and __subclasshook__ here
    def size(self) -> int: ...


T = typing.TypeVar("T")


class Box(typing.Generic[T]):
    pass


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Linear(2, 2)

    def __getattr__(self, name):
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        super().__setattr__(name, value)

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __deepcopy__(self, memo):
        return M()

    def forward(self, x):
        return self.w(x)


def traced(fn):
    @functools.wraps(fn)
    def inner(*args):
        return fn(*args)
    return functools.update_wrapper(inner, fn)


@traced
def shape_of(x: typing.Optional[torch.Tensor]) -> str:
    return "{0.shape} {0.__class__.__name__} {1:>{2}}".format(x, "|", 3)


def check():
    m = copy.deepcopy(M())
    assert isinstance(Sized, abc.ABCMeta) and isinstance(int, type) and isinstance(m, nn.Module)
    assert issubclass(abc.ABCMeta, type) and type(m) is M and type(3) is int
    assert type(m).__name__ == "M" and m.__class__ is M and Kind.SELF.value == 1
    assert Sizes(2).d == 2 and shape_of.__name__ == "shape_of"
    assert Shape(3).n == 3 and Box[int] is not None and enum.Enum("E", "A B").A.value == 1
    logging.Formatter("{levelname} {message}", style="{")
    os.write(1, b"")
    return shape_of(m(torch.ones(1, 2))), "{name}".format_map({"name": "ok"})
'''


def test_honest_machinery_idioms_run():
    module = run(HONEST_MACHINERY)
    assert broken(module) == []
    assert module.check() == ("torch.Size([1, 2]) Tensor   |", "ok")
    assert rules.analyse(rules.without_main(__import__("ast").parse(HONEST_MACHINERY))) == []


def test_the_reader_survives_deep_nesting_and_caps_what_it_lists():
    """A file nested past Python's recursion limit, or breaking a rule on every line, is read
    without crashing and listed in bounded length."""
    deep = "import torch\ny = " + "-" * 900 + "1\nf = torch.nn.MultiheadAttention\n"
    __import__("ast").parse(deep)                  # it parses; walking it recurses too deep
    facts = source_facts.read(deep.encode())
    # read whole where the recursion limit allows, given up on where it does not: never a crash
    assert facts.rules == ()
    assert {f.what for f in facts.forbidden} <= {"torch.nn.MultiheadAttention"}
    many = "".join(f"m{i} = x.f_back\n" for i in range(300))
    found = source_facts.read(many.encode()).rules
    assert 0 < len(found) <= rules.MAX_VIOLATIONS


def test_the_guard_places_every_node_it_adds(monkeypatch):
    """The nodes the guard adds get their place as they are added (``rules._at``), so the
    compiling never walks the whole tree for places it lacks: on every submission of our
    own, the reference and attribute targets of for and with, nothing is left unplaced (the
    code is the same as with the whole tree's walk: 210 sources compared when this changed)."""
    from pathlib import Path

    def whole_tree_walk(tree):
        raise AssertionError("a node the guard added had no place")
    monkeypatch.setattr(rules.ast, "fix_missing_locations", whole_tree_walk)
    root = Path(__file__).resolve().parent
    sources = [p.read_bytes() for p in sorted((root / "submissions").rglob("*.py"))]
    sources.append((root.parent / "solutions" / "mha.py").read_bytes())
    sources.append(textwrap.dedent('''
        import contextlib
        class A: pass
        a = A()
        for a.x, (a.y, b) in [(1, (2, 3))]:
            pass
        with contextlib.nullcontext(5) as a.z:
            pass
        ''').encode())
    for source in sources:
        try:
            rules.compile_guarded(rules.source_text(source), "mha.py", guard.risky_names())
        except SyntaxError:
            continue                  # a fixture that is a syntax error on purpose
