"""Reading STaRK's pickles and tensors without letting the file run code.

STaRK publishes its knowledge bases as pickles (`node_info.pkl`, `*_type_dict.pkl`) and torch
files (`*.pt`). A plain `pickle.load` calls whatever global the file names, so a tampered download
could run any command. Here the pickle may name only plain containers, scalars and the handful of
numpy functions that rebuild arrays and numpy scalars (pandas rows turned into dicts carry numpy
scalars); `.pt` files go through torch's own restricted unpickler (`weights_only=True`). Anything
else stops the load with a `LoadError` that names the file and the refused global, before any of
it is called.

Admitting a global is not enough: a 33-byte pickle can ask `bytearray` for 1.5 GB, numpy for an
array of 10**12 items or for an object array whose state lists fewer items than its shape (numpy
then reads past the list), and a value may contain itself or share one part so often that a loader
rendering it as text never finishes. So every admitted call is priced before it runs and a load may
allocate only what its file size accounts for (`_Budget`); numpy's pickled states are checked where
numpy trusts them; and the finished value is walked once (`_expanded`) to refuse cycles, nesting a
loader cannot recurse through, and expansions beyond the same budget.
"""

from __future__ import annotations

import builtins
import codecs
import collections
import copy
import math
import operator
import os
import pickle
import re
from contextvars import ContextVar
from pathlib import Path

import numpy as np

from stark_pg.skb.records import LoadError

try:  # numpy >= 2 moved its internals to numpy._core; pickles written by numpy 1.x say numpy.core
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core import multiarray as _multiarray
    from numpy.core import numeric as _numeric

# Calling these is as harmless as naming them: no size argument, output no larger than the input.
_SAFE_TYPES = ("int", "float", "complex", "bool")
_FLOOR = 32 << 20       # bytes the admitted calls of any pickle may allocate, plus...
_PER_BYTE = 128         # ...this many per byte of the file (Python objects are far larger than their pickles)
_ITEM = 64              # the price of one item in a new container or a rendered value (a reference, an object)
_MAX_DEPTH = 100        # nesting a loader may recurse through (STaRK's values nest a few levels)
_LATIN1 = {"latin1", "latin-1", "iso-8859-1", "iso8859-1"}      # how protocol-2 pickles store bytes
_POINTER_FLAGS = 0x07   # numpy dtype flags: item holds a reference, pickles as a list, is a pointer
_OBJECT = np.dtype("O")


class _Budget:
    """What one load may still allocate through admitted calls; refusals name the file."""

    def __init__(self, label: str, size: int):
        self.label, self.size = label, size
        self.left = self.limit = _FLOOR + _PER_BYTE * size

    def charge(self, price: int, what: str) -> None:
        if price > self.left:
            raise _refuse(f"{what}: it would allocate about {price:,} bytes, more than a {self.size:,}-byte "
                              f"pickle may ({self.limit:,} bytes in all)")
        self.left -= price


_budget: ContextVar[_Budget] = ContextVar("safe_pickle_budget")


def _error(message: str) -> LoadError:
    return LoadError(message, _budget.get().label)


def _refuse(what: str) -> LoadError:
    return _error(f"refuses {what}")


class _Admitted:
    """An admitted callable as a pickle sees it: every call is priced (bytes it may allocate) and charged to
    the load's budget before it runs, so a few bytes cannot ask for gigabytes. Not a type, so the NEWOBJ
    opcode (`cls.__new__(cls, *args)`, which would skip the price) refuses it."""

    def __init__(self, name: str, target, price):
        self.name, self.target, self.price = name, target, price

    def __call__(self, *args, **kwargs):
        _budget.get().charge(self.price(*args, **kwargs), self.name)
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<admitted {self.name}>"


def _items_price(value) -> int:
    """A new container of `value`'s items: a reference each, and for an array's items a new object each."""
    if isinstance(value, np.ndarray):
        return 4 * _ITEM * (len(value) if value.ndim else 1)
    try:
        return _ITEM * len(value)
    except TypeError:
        return 0                                    # not a collection: the call itself fails


def _bytes_price(source=b"", *args, **kwargs) -> int:
    """bytes() and bytearray() take a size first (as CPython does), then a buffer, text or items."""
    try:
        return operator.index(source)               # bytes(n), bytearray(n): n zero bytes
    except TypeError:
        pass
    try:
        with memoryview(source) as view:
            return view.nbytes
    except (TypeError, ValueError):
        return 4 * len(source) if isinstance(source, str) else _items_price(source)


def _str_price(value="", *args, **kwargs) -> int:
    """Text of a flat value; a container's text grows with every reference to a shared part, so none."""
    if isinstance(value, (str, bytes, bytearray)):
        return 4 * len(value) + _ITEM
    if isinstance(value, np.generic):
        return 4 * value.nbytes + _ITEM
    if value is None or isinstance(value, (int, float, complex)):
        return 5000                                 # Python caps int text at 4,300 digits
    raise _refuse(f"builtins.str of a {type(value).__name__} (its text could be far larger than the file)")


def _container_price(*args, **kwargs) -> int:
    return _ITEM * (1 + len(kwargs)) + sum(_items_price(a) for a in args[:1])


def _encode_price(text, encoding="utf-8", errors="strict") -> int:
    if not isinstance(text, str) or not isinstance(encoding, str) or encoding.lower() not in _LATIN1:
        raise _refuse("_codecs.encode except of text to latin-1 (how protocol-2 pickles store bytes)")
    return len(text) + _ITEM


def _dtype_price(*args, **kwargs) -> int:
    """numpy builds a dtype from its description as a tree: shared parts count each time."""
    return _expanded((args, kwargs), _budget.get().left)[0]


def _never(*args, **kwargs):
    raise _refuse("a direct call of numpy.ndarray (numpy's pickles rebuild arrays with _reconstruct)")


def _checked_dtype(dtype):
    """The dtype an array or scalar built from the pickle gets: checked, and for the kinds whose item size a
    pickled state sets (void, bytes, text) a private copy, since the pickle could later reset the state of
    the dtype object it holds (BUILD) and so grow the items of an array already built over it."""
    if not isinstance(dtype, np.dtype):
        raise _refuse(f"a {type(dtype).__name__} where a numpy dtype belongs")
    if dtype.kind in "VSU":
        dtype = copy.deepcopy(dtype)
    if _lies(dtype):
        raise _refuse(f"a numpy dtype whose pickled state does not describe its items ({dtype!r}, flags {dtype.flags})")
    return dtype


def _lies(dtype: np.dtype) -> bool:
    """numpy trusts a pickled dtype's state (item size, field offsets, flags): one that lies makes it read
    outside an array's memory or take bytes for object pointers. Records and sub-arrays of objects count as
    lying too: only a plain object dtype may hold references."""
    if dtype.kind == "O":
        if dtype.flags != _OBJECT.flags or dtype.itemsize != _OBJECT.itemsize or dtype.fields or dtype.subdtype:
            return True
    elif dtype.flags & _POINTER_FLAGS:
        return True
    for sub, offset, *_ in (dtype.fields or {}).values():
        if offset < 0 or offset + sub.itemsize > dtype.itemsize or _lies(sub):
            return True
    if dtype.subdtype:
        base, shape = dtype.subdtype
        return base.itemsize * math.prod(shape) != dtype.itemsize or _lies(base)
    return False


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (tuple, list)):
        return tuple(map(operator.index, shape))
    return (operator.index(shape),)


def _items(shape) -> int:
    """Items an array's shape lists, zero-length axes counted as one (a (10**12, 0) array has 10**12 rows)."""
    return math.prod(max(d, 1) for d in shape)


def _charge_array(shape, dtype, what: str) -> None:
    _budget.get().charge(_items(shape) * max(dtype.itemsize, 1, _ITEM if dtype.kind == "O" else 1), what)


class _PickledArray(np.ndarray):
    """An array as numpy's pickles rebuild it (`_reconstruct` or `_frombuffer`, then maybe `__setstate__`), with
    the state checked first: numpy reads past an object array's list when the shape asks for more items than
    the list holds. Turned back into a plain ndarray once the load is done."""

    def __setstate__(self, state):
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise _refuse("an array state numpy does not write")
        shape, dtype, data = _shape(state[-4]), _checked_dtype(state[-3]), state[-1]
        if dtype.hasobject and not (isinstance(data, list) and len(data) == math.prod(shape)):
            raise _refuse(f"an object array whose state lists {len(data) if isinstance(data, list) else 'no'} items "
                          f"for shape {shape}")
        _charge_array(shape, dtype, "numpy.ndarray state")
        super().__setstate__((*state[:-3], dtype, *state[-2:]))


def _reconstruct(subtype, shape, dtype):
    if subtype is not ALLOWED[("numpy", "ndarray")]:
        raise _refuse(f"_reconstruct of a {subtype!r} (only numpy.ndarray)")
    if isinstance(dtype, (str, bytes)):  # numpy writes b"b", a code; a description goes through numpy.dtype
        dtype = np.dtype(dtype)
    shape, dtype = _shape(shape), _checked_dtype(dtype)
    _charge_array(shape, dtype, "numpy.core.multiarray._reconstruct")
    return _multiarray._reconstruct(_PickledArray, shape, dtype)


def _scalar(dtype, *args):
    return _multiarray.scalar(_checked_dtype(dtype), *args)


def _frombuffer(buffer, dtype, shape, *args):
    shape, dtype = _shape(shape), _checked_dtype(dtype)
    _charge_array(shape, dtype, "numpy.core.numeric._frombuffer")
    return _numeric._frombuffer(buffer, dtype, shape, *args).view(_PickledArray)  # a later BUILD is checked too


def _allowed() -> dict[tuple[str, str], object]:
    """(module, name) -> the object handed back. Nothing is imported by name: a global is admitted only if listed."""
    plain = {name: getattr(builtins, name) for name in _SAFE_TYPES}
    plain |= {name: _Admitted(f"builtins.{name}", getattr(builtins, name), _bytes_price)
              for name in ("bytes", "bytearray")}
    plain |= {name: _Admitted(f"builtins.{name}", getattr(builtins, name), _container_price)
              for name in ("dict", "list", "tuple", "set", "frozenset")}
    plain["str"] = _Admitted("builtins.str", str, _str_price)
    table: dict[tuple[str, str], object] = {}
    for module in ("builtins", "__builtin__"):  # protocol 0-2 pickles say __builtin__
        table.update({(module, name): value for name, value in plain.items()})
    table[("collections", "OrderedDict")] = _Admitted("collections.OrderedDict", collections.OrderedDict,
                                                      _container_price)
    table[("_codecs", "encode")] = _Admitted("_codecs.encode", codecs.encode, _encode_price)
    table[("numpy", "ndarray")] = _Admitted("numpy.ndarray", np.ndarray, _never)  # passed to _reconstruct
    table[("numpy", "dtype")] = _Admitted("numpy.dtype", np.dtype, _dtype_price)
    free = lambda *args, **kwargs: _ITEM  # noqa: E731 - the function charges what it builds itself
    for core in ("numpy.core", "numpy._core"):  # written by numpy 1.x and 2.x respectively
        table[(f"{core}.multiarray", "_reconstruct")] = _Admitted(f"{core}.multiarray._reconstruct", _reconstruct, free)
        table[(f"{core}.multiarray", "scalar")] = _Admitted(f"{core}.multiarray.scalar", _scalar, free)
        table[(f"{core}.numeric", "_frombuffer")] = _Admitted(f"{core}.numeric._frombuffer", _frombuffer, free)
    return table


ALLOWED = _allowed()


def _children(value) -> list | None:
    """The parts a loader will walk into, or None for a leaf."""
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        return list(value.flat)
    return None


def _leaf_size(value) -> int:
    if isinstance(value, (str, bytes, bytearray)):
        return _ITEM + len(value)
    if isinstance(value, np.ndarray):
        return _items(value.shape) * max(_ITEM, value.itemsize)
    return _ITEM


_FLAT = {int, float, bool, complex, type(None)}   # leaves of one item's price (numpy scalars join as met)


def _rebuilt(value, kids: list, replaced: dict):
    """`value` with its replaced parts swapped in: in place for mutable containers, a new tuple otherwise."""
    new = [replaced.get(id(kid), kid) for kid in kids]
    if isinstance(value, list):
        value[:] = new
    elif isinstance(value, dict):
        for key, item in zip(value.keys(), new[len(value):]):
            value[key] = item
    elif isinstance(value, np.ndarray):
        for position, item in enumerate(new):
            value.flat[position] = item
    elif isinstance(value, tuple):
        return tuple(new)
    return value  # sets hold no arrays (arrays cannot be hashed)


def _expanded(root, limit: int):
    """(size, value): `root` sized as the tree a loader walks (a part shared n times counts n times: what
    JSON or text rendering of it produces), with the arrays rebuilt here turned back into plain ndarrays.
    Refuses a value that contains itself, nests deeper than a loader can recurse, or exceeds `limit`.
    Iterative, so the walk itself can neither recurse too deeply nor loop."""
    holder = [root]
    sizes: dict[int, int] = {}        # finished containers -> size
    replaced: dict[int, object] = {}  # parts that change -> what replaces them
    keep: list = []                   # what was replaced stays alive, so its id is not reused meanwhile
    walking = {id(holder)}            # the containers being walked: meeting one again is a cycle
    frames = [[holder, [root], 0, _ITEM, False]]  # container, its parts, next part, size so far, a part changed
    while frames:
        frame = frames[-1]
        value, kids, start, size, changed = frame
        below = None
        for position in range(start, len(kids)):
            kid = kids[position]
            kind = type(kid)
            if kind is str:
                size += _ITEM + len(kid)
            elif kind in _FLAT:
                size += _ITEM
            elif (key := id(kid)) in sizes:
                size += sizes[key]
                changed = changed or key in replaced
            elif key in walking:
                raise _error("contains itself: a value that holds itself (a cycle) would never end when read")
            elif (grandkids := _children(kid)) is not None:
                below = (kid, grandkids)
                frame[2:] = [position + 1, size, changed]
                break
            else:
                size += _leaf_size(kid)
                if isinstance(kid, np.generic):
                    _FLAT.add(kind)
                elif kind is _PickledArray:
                    replaced[key] = kid.view(np.ndarray)
                    keep.append(kid)
                    changed = True
        if below:
            if len(frames) > _MAX_DEPTH:
                raise _error(f"nested more than {_MAX_DEPTH} levels deep: too deep to read")
            walking.add(id(below[0]))
            frames.append([below[0], below[1], 0, _ITEM, False])
            continue
        frames.pop()
        walking.discard(id(value))
        if size > limit:
            raise _error(f"expands to more than {limit:,} bytes once its shared parts are repeated as a loader "
                         "reads them: refused")
        sizes[id(value)] = size
        new = _rebuilt(value, kids, replaced) if changed else value
        if type(new) is _PickledArray:
            new = new.view(np.ndarray)
        if new is not value:
            replaced[id(value)] = new
            keep.append(value)
        if frames:
            frames[-1][3] += size
            frames[-1][4] = frames[-1][4] or new is not value
    return sizes[id(holder)] - _ITEM, holder[0]


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
    """The object stored in `path`, if it is made only of admitted types within the file's budget (see
    `_Budget`, `_expanded`); else a LoadError naming `label`."""
    label = label or Path(path).name
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror}", label) from exc
    with handle:
        budget = _Budget(label, os.fstat(handle.fileno()).st_size)
        token = _budget.set(budget)
        try:
            value = _RestrictedUnpickler(handle, label).load()
            return _expanded(value, budget.limit)[1]
        except LoadError:
            raise
        except RecursionError:
            raise LoadError("nested too deeply to unpickle", label) from None
        except Exception as exc:  # truncated or corrupt files fail in many ways inside pickle and numpy
            raise LoadError(f"not a readable pickle ({type(exc).__name__}: {exc})", label) from None
        finally:
            _budget.reset(token)


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
        raise LoadError(f"not a readable torch file ({_torch_reason(str(exc))})", label) from None
    except EOFError:
        raise LoadError("not a readable torch file (it ends too early: truncated?)", label) from None
    except Exception as exc:
        raise LoadError(f"not a readable torch file ({type(exc).__name__}: {_torch_reason(str(exc))})",
                        label) from None


def _torch_reason(message: str) -> str:
    """What is wrong with the file, out of torch's message: its own reason (after "WeightsUnpickler
    error:"), or its first sentence. Never torch's advice to retry with `weights_only=False`: that
    would run whatever code the file carries, and these files come from anywhere."""
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\s*\n|\Z)", message, re.S)
    reason = " ".join((found.group(1) if found else message).split())
    if not found:
        reason = re.split(r"(?<=[.!])\s", reason, maxsplit=1)[0]
    if "weights_only" in reason:
        return "torch's restricted unpickler refused it"
    return reason.rstrip(".") or "no reason given"
