"""py.typed and the type stubs: every public function's stub has the runtime's parameters (names,
kinds, which have defaults, in order), the stubs cover the public API, and (when mypy is
installed, as in python/ci.sh) a sample program type-checks against them."""
import ast
import inspect
import os
import shutil
import subprocess
import sys

import pytest

import fa4
import fa4.flash_attn_compat
import fa4.flash_attn_interface

PKG = os.path.dirname(fa4.__file__)
STUBS = {"__init__.pyi": fa4, "flash_attn_compat.pyi": fa4.flash_attn_compat,
         "flash_attn_interface.pyi": fa4.flash_attn_interface}


def _stub_functions(name):
    with open(os.path.join(PKG, name)) as f:
        tree = ast.parse(f.read())
    funcs, reexported = {}, set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.ImportFrom):  # `from .flash_attn_compat import f as f`: checked there
            reexported |= {a.asname for a in node.names if a.asname == a.name}
    return funcs, reexported


def _stub_params(fn):
    a = fn.args
    out = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for p, d in zip(pos, defaults):
        out.append((p.arg, "POSITIONAL_OR_KEYWORD", d is not None))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, "KEYWORD_ONLY", d is not None))
    return out


def _runtime_params(f):
    return [(p.name, p.kind.name, p.default is not inspect.Parameter.empty)
            for p in inspect.signature(f).parameters.values()]


def test_py_typed_present():
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    for name in list(STUBS) + ["_types.pyi"]:
        assert os.path.isfile(os.path.join(PKG, name)), name


@pytest.mark.parametrize("stub", sorted(STUBS))
def test_stubs_match_runtime_signatures(stub):
    mod = STUBS[stub]
    funcs, reexported = _stub_functions(stub)
    public = [n for n in getattr(mod, "__all__", []) if inspect.isfunction(getattr(mod, n, None))]
    missing = [n for n in public if n not in funcs and n not in reexported]
    assert not missing, f"{stub}: no stub for {missing}"
    for name, defs in funcs.items():
        runtime = _runtime_params(getattr(mod, name))
        # every overload has the runtime's parameters (names, kinds, order); one of them also has
        # its defaults (the others leave out the default of the argument they overload on)
        for d in defs:
            assert [p[:2] for p in _stub_params(d)] == [p[:2] for p in runtime], f"{stub}: {name}"
        assert runtime in [_stub_params(d) for d in defs], f"{stub}: {name}: defaults differ"


SAMPLE = '''
import numpy as np
import fa4
from fa4.flash_attn_interface import flash_attn_func, flash_attn_combine

q = np.zeros((1, 4, 2, 8), np.float32)
out = fa4.attention(q, q, q, causal=True)
o2, lse = fa4.attention(q, q, q, return_lse=True)
o3 = flash_attn_func(q, q, q, None, True, window_size=(4, None))
o4, l4 = flash_attn_combine(np.zeros((2, 1, 4, 2, 8), np.float32), np.zeros((2, 1, 4, 2), np.float32))
ok: bool = fa4.backend_available("cpu")
v: str = fa4.__version__
try:
    fa4.attention(q, q, q)
except fa4.Fa4Error as e:
    name: "str | None" = e.argument
'''

BAD_SAMPLE = '''
import fa4
fa4.backend_available("tpu")
fa4.attention(1, 2, 3, causal=True, no_such_argument=1)
'''


def test_mypy_accepts_sample_and_rejects_misuse(tmp_path):
    if shutil.which("mypy") is None and subprocess.run([sys.executable, "-m", "mypy", "--version"],
                                                       capture_output=True).returncode != 0:
        pytest.skip("mypy is not installed (python/ci.sh installs it)")
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(SAMPLE)
    bad.write_text(BAD_SAMPLE)
    env = dict(os.environ, MYPYPATH="")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "c"),
                        "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}", str(good)],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "c"), str(bad)],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert r.returncode == 1 and "bad.py:3: error" in r.stdout and "backend_available" in r.stdout, r.stdout
    assert "bad.py:4: error" in r.stdout and "attention" in r.stdout, r.stdout
