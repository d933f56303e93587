"""Hostile pickles that name only admitted globals: tiny files must not make them allocate gigabytes,
corrupt memory, or hand the loader a value it cannot walk (a cycle, a part shared into billions).

The pickles are written opcode by opcode here. Those that would allocate or crash run in a child
process (a crash must fail the test, not end the session) that reports the error and its peak memory.
"""

from __future__ import annotations

import json
import pickle
import pickletools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loaders.safe_pickle import load_pickle
from loaders.stark_processed import StarkProcessedSource
from stark_fixtures import write_processed
from stark_pg.skb.records import LoadError

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20


def push(value) -> bytes:
    """Opcodes that push a plain value (protocol 2, no memo entries)."""
    return pickletools.optimize(pickle.dumps(value, 2))[2:-1]


def glob(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


def call(module: str, name: str, *args: bytes) -> bytes:
    return glob(module, name) + b"(" + b"".join(args) + b"tR"


def pickled(*ops: bytes) -> bytes:
    return b"\x80\x02" + b"".join(ops) + b"."


def dtype_with_state(spec: str, state: tuple) -> bytes:
    """A numpy dtype whose pickled state (item size, fields, flags) says what the attacker wants."""
    return call("numpy", "dtype", push(spec), push(False), push(True)) + push(state) + b"b"


def shared_lists(depth: int) -> bytes:
    """[L, L] of [L, L] ... `depth` times, each level one object referenced twice: a few bytes a level."""
    level = b"(h\x00h\x00lq\x000"                       # MARK, get, get, LIST, put, pop
    return b"]q\x000" + level * depth + b"h\x00"


HEX_CHAIN = glob("_codecs", "encode") + b"q\x010" + push("hex") + b"q\x020"

ALLOCATING = {
    "bytearray(1.5e9)": (pickled(call("__builtin__", "bytearray", push(1_500_000_000))),
                         r"refuses builtins.bytearray.*would allocate"),
    "bytes(1.5e9)": (pickled(call("builtins", "bytes", push(1_500_000_000))),
                     r"refuses builtins.bytes.*would allocate"),
    "bytes.__new__ by NEWOBJ": (pickled(glob("builtins", "bytes"), push((1_500_000_000,)), b"\x81"),
                                r"NEWOBJ class argument must be a type"),
    "numpy bytes as a size": (pickled(call("builtins", "bytearray", push(np.int64(1_500_000_000)))),
                              r"refuses builtins.bytearray.*would allocate"),
    "hex codec doubling 28 times": (pickled(HEX_CHAIN, b"h\x01" * 28, b"C\x01x", b"h\x02\x86R" * 28),
                                    r"refuses _codecs.encode"),
    "str of a shared structure": (pickled(call("builtins", "str", shared_lists(25))),
                                  r"refuses builtins.str of a list"),
    "empty array of 1.5e9 items": (pickled(call("numpy.core.multiarray", "_reconstruct", glob("numpy", "ndarray"),
                                                push((1_500_000_000,)), b"C\x01b")),
                                   r"refuses numpy.*would allocate"),
    "object array state longer than its list": (
        pickled(call("numpy.core.multiarray", "_reconstruct", glob("numpy", "ndarray"), push((0,)), b"C\x01b"),
                push((1, (50_000_000,), np.dtype("O"), False, [1])), b"b"),
        r"object array"),
    "object array state on an array from a buffer": (
        pickled(call("numpy.core.numeric", "_frombuffer", b"C\x00", push(np.dtype("b")), push((0,)), push("C")),
                push((1, (50_000_000,), np.dtype("O"), False, [1])), b"b"),
        r"object array"),
    "zero-size items, 1e12 of them": (pickled(call("numpy.core.multiarray", "_reconstruct", glob("numpy", "ndarray"),
                                                   push((1_000_000_000_000, 0)), b"C\x01b")),
                                      r"would allocate"),
    "dtype claiming object pointers": (
        pickled(call("numpy.core.numeric", "_frombuffer", b"C\x08AAAAAAAA",
                     dtype_with_state("V8", (3, "|", None, None, None, 8, 1, 63)), push((1,)), push("C"))),
        r"refuses a numpy dtype"),
    "dtype with a field outside its items": (
        pickled(call("numpy.core.numeric", "_frombuffer", b"C\x08AAAAAAAA",
                     dtype_with_state("V8", (3, "|", None, ("a",), {"a": (np.dtype("f8"), 1 << 20)}, 8, 1, 16)),
                     push((1,)), push("C"))),
        r"refuses a numpy dtype"),
}

# An array of two bytes over a V1 dtype the pickle keeps; the pickle then resets that dtype to 1 MB items
# and copies the array: numpy would read 2 MB from a 2-byte buffer unless the array's dtype is its own.
DTYPE_RESET_AFTER_USE = pickled(
    call("numpy", "dtype", push("V1"), push(False), push(True)), b"q\x000",
    call("numpy.core.multiarray", "_reconstruct", glob("numpy", "ndarray"), push((0,)), b"C\x01b"),
    b"(", push(1), push((2,)), b"h\x00", push(False), b"C\x02abt", b"bq\x010",
    b"h\x00", push((3, "|", None, None, None, 1 << 20, 1, 0)), b"b0",
    call("builtins", "bytes", b"h\x01"))

CHILD = """
import json, resource, sys, tracemalloc
import numpy as np
from loaders.safe_pickle import load_pickle
from stark_pg.skb.records import LoadError

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
try:
    value = load_pickle(sys.argv[1])
    error = None
    if isinstance(value, np.ndarray):
        value.tolist()      # what a loader does with it (reads every item)
except LoadError as exc:
    error, value = str(exc), None
peak = tracemalloc.get_traced_memory()[1]
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"error": error, "value": repr(value)[:200], "peak": peak, "grown": grown}))
"""


def run_child(tmp_path, payload: bytes) -> dict:
    path = tmp_path / "node_info.pkl"
    path.write_bytes(payload)
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, f"the child died (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout)


@pytest.mark.parametrize("case", list(ALLOCATING))
def test_admitted_calls_cannot_allocate_beyond_the_file(tmp_path, case):
    payload, message = ALLOCATING[case]
    assert len(payload) < 400, "the point is a tiny file"
    report = run_child(tmp_path, payload)
    assert report["error"] is not None, "the pickle was admitted"
    assert report["error"].startswith("node_info.pkl: "), report["error"]
    assert "Traceback" not in report["error"]
    assert re.search(message, report["error"]), report["error"]
    assert report["peak"] < 50 * MB, f"traced peak {report['peak'] / MB:.0f} MB"
    assert report["grown"] < 100 * MB, f"resident set grew {report['grown'] / MB:.0f} MB"


def test_a_dtype_reset_after_use_cannot_grow_an_array(tmp_path):
    report = run_child(tmp_path, DTYPE_RESET_AFTER_USE)
    assert report["error"] is None and report["value"] == repr(b"ab"), report
    assert report["peak"] < 50 * MB


# -- values the loader cannot walk ----------------------------------------------------------------

CYCLIC_LIST = pickled(b"]q\x00h\x00a")                                   # l = []; l.append(l)
CYCLIC_DICT = pickled(b"}q\x00", push("a"), b"h\x00s")                   # d = {}; d["a"] = d
CYCLE_THROUGH_TUPLE = pickled(b"]q\x00h\x00\x85a")                       # l = []; l.append((l,))
SHARED_40_TIMES = pickled(shared_lists(40))                               # 2**40 leaves once expanded
DEEP = pickled(b"]" * 100_000 + b"a" * 99_999)                            # lists nested 100,000 deep


@pytest.mark.parametrize("payload, message", [
    (CYCLIC_LIST, r"contains itself"), (CYCLIC_DICT, r"contains itself"), (CYCLE_THROUGH_TUPLE, r"contains itself"),
    (SHARED_40_TIMES, r"expands to more than"), (DEEP, r"nested more than \d+ levels deep")])
def test_cycles_shared_expansions_and_depth_are_clear_errors(tmp_path, payload, message):
    path = tmp_path / "node_type_dict.pkl"
    path.write_bytes(payload)
    with pytest.raises(LoadError, match=rf"^node_type_dict.pkl: {message}"):
        load_pickle(path)


@pytest.mark.parametrize("value", ["cycle", "deep"])
def test_a_loader_reading_such_a_node_gets_a_load_error_not_a_recursion_error(tmp_path, value):
    attributes = {"name": "SMAD3", "type": "gene/protein", "source": "NCBI", "details": {}}
    if value == "cycle":
        attributes["details"]["self"] = attributes
        payload = pickle.dumps({0: attributes, 1: {}, 2: {}, 3: {}}, protocol=4)
    else:  # pickle.dumps itself recurses; write the nesting by hand inside node 0's details
        inner = b"]" * 5000 + b"a" * 4999
        payload = pickled(b"}(", push(0), b"}(", push("name"), push("SMAD3"), push("details"), inner, b"u",
                          push(1), b"}", push(2), b"}", push(3), b"}", b"u")
    directory = write_processed(tmp_path / "kb", "prime", replace={"node_info": payload})
    with pytest.raises(LoadError, match=r"^node_info.pkl: (contains itself|nested more than)"):
        list(StarkProcessedSource(directory).nodes())


def test_admitted_values_come_back_as_themselves(tmp_path):
    """Arrays rebuilt under the checks are plain ndarrays again; shared parts stay shared."""
    shared = [1, 2]
    value = {"a": np.arange(6).reshape(2, 3), "b": (np.array(["x", "y"]), shared, shared), "c": bytearray(b"raw"),
             "d": np.array([np.arange(2), None], dtype=object), "e": {np.float32(1.5), frozenset({1})},
             "f": np.array([], dtype=object), "g": np.zeros(2, dtype=[("x", "f8"), ("y", "U3")])}
    for protocol in (2, 4, 5):
        path = tmp_path / f"value{protocol}.pkl"
        path.write_bytes(pickle.dumps(value, protocol=protocol))
        loaded = load_pickle(path)
        assert type(loaded["a"]) is np.ndarray and loaded["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
        assert type(loaded["b"][0]) is np.ndarray and loaded["b"][0].tolist() == ["x", "y"]
        assert loaded["b"][1] is loaded["b"][2] and loaded["c"] == bytearray(b"raw")
        assert type(loaded["d"][0]) is np.ndarray and loaded["d"][0].tolist() == [0, 1] and loaded["d"][1] is None
        assert loaded["e"] == {np.float32(1.5), frozenset({1})} and loaded["f"].shape == (0,)
        assert loaded["g"].dtype == value["g"].dtype and loaded["g"].tolist() == [(0.0, ""), (0.0, "")]


def test_a_large_plain_pickle_is_not_limited(tmp_path):
    """The limits scale with the file: a 40 MB array and bytes through protocol 2's constructors load."""
    value = {"array": np.ones(5_000_000), "bytes": b"\x01" * (4 * MB), "set": set(range(200_000))}
    path = tmp_path / "big.pkl"
    path.write_bytes(pickle.dumps(value, protocol=2))
    loaded = load_pickle(path)
    assert loaded["array"].sum() == 5_000_000 and len(loaded["bytes"]) == 4 * MB and len(loaded["set"]) == 200_000


def _truncated_zip(path: Path) -> None:
    import torch

    torch.save({1: torch.zeros(3)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


CORRUPT_TENSOR_FILES = {
    "random bytes": lambda path: path.write_bytes(bytes(range(7, 250)) * 2),
    "not a zip": lambda path: path.write_bytes(b"PK\x03\x04garbage"),
    "truncated zip": _truncated_zip,
    "empty": lambda path: path.write_bytes(b""),
}


@pytest.mark.parametrize("make", CORRUPT_TENSOR_FILES.values(), ids=CORRUPT_TENSOR_FILES)
def test_a_corrupt_tensor_file_is_one_line_that_never_advises_loading_untrusted_pickles(tmp_path, make):
    """torch's own message for a file its restricted unpickler refuses says to retry with
    weights_only=False, which would run whatever code the file carries: the error keeps torch's reason
    and drops that advice."""
    from loaders.safe_pickle import load_tensor

    path = tmp_path / "candidate_emb_dict.pt"
    make(path)
    with pytest.raises(LoadError) as caught:
        load_tensor(path)
    message = str(caught.value)
    assert message.startswith("candidate_emb_dict.pt: not a readable torch file (")
    assert "\n" not in message
    assert "weights_only" not in message and "trusted source" not in message
