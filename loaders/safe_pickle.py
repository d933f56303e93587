"""Reading STaRK's pickles and tensors without letting the file run code.

STaRK publishes its knowledge bases as pickles (`node_info.pkl`, `*_type_dict.pkl`) and torch
files (`*.pt`). A plain `pickle.load` calls whatever global the file names, so a tampered download
could run any command. Here the pickle may name only plain containers, scalars and the handful of
numpy functions that rebuild arrays and numpy scalars (pandas rows turned into dicts carry numpy
scalars); `.pt` files go through torch's own restricted unpickler (`weights_only=True`). Anything
else stops the load with a `LoadError` that names the file and the refused global, before any of
it is called.
"""

from __future__ import annotations

import builtins
import codecs
import collections
import pickle
import re
from pathlib import Path

import numpy as np

from stark_pg.skb.records import LoadError

try:  # numpy >= 2 moved its internals to numpy._core; pickles written by numpy 1.x say numpy.core
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core import multiarray as _multiarray
    from numpy.core import numeric as _numeric

_PLAIN = ("dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray", "int", "float", "complex",
          "bool")


def _allowed() -> dict[tuple[str, str], object]:
    """(module, name) -> the object handed back. Nothing is imported by name: a global is admitted only if listed."""
    table: dict[tuple[str, str], object] = {}
    for module in ("builtins", "__builtin__"):  # protocol 0-2 pickles say __builtin__
        table.update({(module, name): getattr(builtins, name) for name in _PLAIN})
    table[("collections", "OrderedDict")] = collections.OrderedDict
    table[("_codecs", "encode")] = codecs.encode  # protocol-2 pickles store bytes as latin-1 text
    table[("numpy", "ndarray")] = np.ndarray
    table[("numpy", "dtype")] = np.dtype
    for core in ("numpy.core", "numpy._core"):  # written by numpy 1.x and 2.x respectively
        table[(f"{core}.multiarray", "_reconstruct")] = _multiarray._reconstruct
        table[(f"{core}.multiarray", "scalar")] = _multiarray.scalar
        table[(f"{core}.numeric", "_frombuffer")] = _numeric._frombuffer
    return table


ALLOWED = _allowed()


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, label: str):
        super().__init__(file)
        self.label = label

    def find_class(self, module: str, name: str):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise LoadError(f"refuses to unpickle {module}.{name}: only plain containers, scalars and numpy "
                            "arrays may appear in this file (a global like this could run code)", self.label) from None

    def persistent_load(self, pid):
        raise LoadError("refuses a pickle with persistent ids (not a plain data pickle)", self.label)


def load_pickle(path: Path, label: str | None = None):
    """The object stored in `path`, if it is made only of admitted types; else a LoadError naming `label`."""
    label = label or Path(path).name
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror}", label) from exc
    with handle:
        try:
            return _RestrictedUnpickler(handle, label).load()
        except LoadError:
            raise
        except RecursionError:
            raise LoadError("nested too deeply to unpickle", label) from None
        except Exception as exc:  # truncated or corrupt files fail in many ways inside pickle and numpy
            raise LoadError(f"not a readable pickle ({type(exc).__name__}: {exc})", label) from None


_TORCH_GLOBAL = re.compile(r"(?:GLOBAL|global)\s+([\w.]+)")


def load_tensor(path: Path, label: str | None = None):
    """A tensor file read by torch's restricted unpickler; refusals and corrupt files become LoadErrors."""
    import torch

    label = label or Path(path).name
    if not Path(path).is_file():
        raise LoadError("missing", label)
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        found = _TORCH_GLOBAL.search(str(exc))
        if found:
            raise LoadError(f"refuses to unpickle {found.group(1)}: torch.load(weights_only=True) admits only "
                            "tensors and plain containers", label) from None
        raise LoadError(f"not a readable torch file ({str(exc).splitlines()[0]})", label) from None
    except Exception as exc:
        raise LoadError(f"not a readable torch file ({type(exc).__name__}: {exc})", label) from None
