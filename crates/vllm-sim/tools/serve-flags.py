#!/usr/bin/env python3
"""Writes the option list of a real vLLM's `vllm serve` parser, for vllm-sim (a simulator).

vllm-sim must reject the flags vLLM does not have, accept the ones it has (even those the
simulator ignores) and expand argparse abbreviations the way vLLM does; for that it needs every
option string of the real parser in the parser's own order (argparse lists the candidates of an
ambiguous prefix in that order). This tool builds that parser from vLLM's own sources
(`make_arg_parser`) and prints one line per option:

    <nargs> <spelling> [<spelling> ...]

where <nargs> is argparse's: `0` (a flag without a value), `1` (one value), `?` (an optional
value), `+` / `*` (a list). Every spelling the parser registered is listed, in the parser's
order; one that argparse does not show in its messages (the hidden `--no-enable-x` of vLLM's
EnableDisableAction) starts with `~`.

vLLM's modules import torch, transformers and a long tail of packages at import time, which this
machine does not need to have: every module that is not installed is replaced by an inert stub,
asserts are skipped (`python3 -O`), and the platform is vLLM's CPU platform. Only the parser is
built; no model code runs. The stubs can break with a new vLLM; the output is checked in.

Re-run (Python >= 3.10 with pydantic 2; the wheel is large, only its .py files are needed):

    pip download vllm==0.34.0 --no-deps -d /tmp/vllm-wheel
    unzip -o -q /tmp/vllm-wheel/vllm-0.34.0-*.whl 'vllm/*.py' -d /tmp/vllm034
    python3 -O crates/vllm-sim/tools/serve-flags.py /tmp/vllm034 > crates/vllm-sim/src/serve_flags_0.34.0.txt

and the same with 0.18.0 for src/serve_flags_0.18.0.txt.
"""

import abc
import contextlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types

# Installed modules that vLLM's config classes need for real (pydantic builds the dataclasses).
REAL = {"vllm", "pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection"}


class StubBase:
    def __init_subclass__(cls, **kw):
        pass

    def __init__(self, *a, **k):
        pass


class StubMeta(abc.ABCMeta):
    """A class that is also every attribute, call result, item and operator result of itself."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name == "ns":  # torch.library.Library(...).ns is used as an attribute name
            return "stub_ns"
        return Stub

    def __getitem__(cls, k):
        return Stub

    def __setitem__(cls, k, v):
        pass

    def __delitem__(cls, k):
        pass

    def __call__(cls, *a, **k):
        # Used as a decorator: return what it decorates.
        if len(a) == 1 and callable(a[0]) and not k and not isinstance(a[0], StubMeta):
            return a[0]
        return Stub

    def __iter__(cls):
        return iter((Stub, Stub))

    def __contains__(cls, k):
        return False

    def __len__(cls):
        return 0

    def __bool__(cls):
        return False

    def __int__(cls):
        return 0

    def __index__(cls):
        return 0

    def __float__(cls):
        return 0.0

    def __hash__(cls):
        return id(cls)

    def __lt__(cls, o):
        return False

    def __gt__(cls, o):
        return False

    def __le__(cls, o):
        return True

    def __ge__(cls, o):
        return True

    def __enter__(cls):
        return cls

    def __exit__(cls, *a):
        return False

    def __mro_entries__(cls, bases):
        return (StubBase,)


for _op in ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift", "matmul"]:
    setattr(StubMeta, f"__{_op}__", lambda cls, o: Stub)
    setattr(StubMeta, f"__r{_op}__", lambda cls, o: Stub)


class Stub(metaclass=StubMeta):
    def __init_subclass__(cls, **kw):
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.any_schema()


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return "0.0.0"
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs every module that is not installed (and everything under a stubbed package)."""

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if isinstance(sys.modules.get(top), StubModule):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if top in REAL or top in sys.stdlib_module_names:
            return None
        if importlib.machinery.PathFinder.find_spec(top) is not None:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        m = StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def main():
    if len(sys.argv) != 2 or sys.flags.optimize < 1:
        sys.exit("usage: python3 -O serve-flags.py <directory holding vllm/>")
    sys.path.insert(0, sys.argv[1])
    sys.meta_path.insert(0, StubFinder())
    real_version = importlib.metadata.version

    def version(name):
        try:
            return real_version(name)
        except importlib.metadata.PackageNotFoundError:
            return {"torch": "2.14.0"}.get(name, "0.0.0")

    importlib.metadata.version = version

    # vLLM logs to stdout while it imports; only the list goes there.
    with contextlib.redirect_stdout(sys.stderr):
        from vllm import platforms
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
        try:
            from vllm.entrypoints.common.cli_args import make_arg_parser  # 0.34
        except ImportError:
            from vllm.entrypoints.openai.cli_args import make_arg_parser  # 0.18
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        from vllm.version import __version__

        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    print(f"# `vllm serve` options of vLLM {__version__}, written by crates/vllm-sim/tools/serve-flags.py")
    print("# from vLLM's own parser; do not edit. <nargs> <spelling>...: 0 flag, 1 value, ? optional, + * list;")
    print("# ~: a spelling argparse accepts but does not show")
    by_action = {}
    for spelling, action in parser._option_string_actions.items():
        by_action.setdefault(id(action), (action, []))[1].append(spelling)
    for action, spellings in by_action.values():
        nargs = action.nargs
        if nargs is None:
            nargs = 1
        shown = [s if s in action.option_strings else "~" + s for s in spellings]
        print(f"{nargs} {' '.join(shown)}")


if __name__ == "__main__":
    main()
