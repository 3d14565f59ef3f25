"""The judge's wire format: plain values out of a student's kernel, and nothing else back in.

Contract: ``Encoder().value(v)`` turns a value into a JSON tree plus raw buffers (arrays and
tensors travel as bytes); a value it cannot carry becomes an *opaque* node that names its
type. ``dump(header, buffers)`` packs a header (any JSON object holding such trees) and the
buffers into one byte string; ``load(data)`` unpacks it and ``Decoder(buffers).value(tree)``
rebuilds the values. Every malformed input raises `WireError` with a one-line reason.

What travels (and comes back as the same type):
- ``None``, ``bool``, ``int``, ``float`` (nan and infinities included), ``str``, ``bytes``;
- ``list``, ``tuple``, ``dict``, ``set``, ``frozenset`` of those (any depth up to
  `MAX_DEPTH`; subclasses travel as the base type, dict views and ranges as lists);
- NumPy arrays and scalars of numeric, bool, string or datetime dtypes (never object or
  structured dtypes), PyTorch tensors of the dtypes in `TORCH_DTYPES` (back on the device
  they were on when this machine has it);
- instances of the dataclasses, named tuples and enums that `mlinfra_lab` itself defines
  (a `RetentionPolicy`, a `Level`), rebuilt from their fields by the library's own class;
- exceptions, for the judge to raise again: the first class of their MRO that is a builtin
  or an `mlinfra_lab` class, with their arguments.

Design decisions:
- The decoder is the security boundary: it runs in the judge, on bytes a hostile kernel
  wrote. It never unpickles, never imports anything outside `mlinfra_lab` (and ``torch``
  for tensors), never builds an object dtype, checks every length against the buffer it
  claims, and bounds nesting, so the worst a forged record can do is fail to decode.
- The encoder runs in the student's kernel and is therefore *not* trusted: whatever it
  writes is at most a value the student's function could have returned. It converts with
  the base types' own methods (``np.asarray``, ``tensor.detach().cpu()``), so a subclass
  that overrides comparisons or ``__array_function__`` arrives as a plain array.
- JSON for structure, raw bytes for arrays: readable when debugging, exact for floats
  (``json`` writes ``repr``), and no parser for a binary format of our own beyond offsets.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import math
import re
import struct
import sys
from collections.abc import ItemsView, Iterable
from typing import Any

from .errors import WireError

__all__ = ["MAGIC", "MAX_DEPTH", "TORCH_DTYPES", "Decoder", "Encoder", "dump", "load"]

MAGIC = b"MLINFRA-JUDGE-1\n"
MAX_DEPTH = 64  # nesting of containers, both ways
MAX_NDIM = 32
MAX_HEADER_BYTES = 64 << 20
TORCH_DTYPES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)
_PACKAGE = "mlinfra_lab"
_NUMPY_KINDS = "biufcSUMm"  # bool, ints, floats, complex, bytes, str, datetimes
_QUALNAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__name__)}"


def _ours(kind: type) -> bool:
    module = getattr(kind, "__module__", "") or ""
    return module == _PACKAGE or module.startswith(_PACKAGE + ".")


class Encoder:
    """Values -> JSON trees; arrays and tensors go to `buffers` (see the module docstring)."""

    def __init__(self) -> None:
        self.buffers: list[bytes] = []

    def _buffer(self, data: bytes) -> int:
        self.buffers.append(bytes(data))
        return len(self.buffers) - 1

    def value(self, v: Any, depth: int = 0) -> Any:
        """The JSON tree of `v` (an opaque node when `v` cannot travel)."""
        if depth >= MAX_DEPTH:
            return {"~": "opaque", "type": "a structure nested too deeply"}
        try:
            return self._value(v, depth)
        except Exception:  # noqa: BLE001 - a value that breaks its own conversion is opaque
            return {"~": "opaque", "type": _type_name(v)}

    def _value(self, v: Any, depth: int) -> Any:
        np = sys.modules.get("numpy")
        torch = sys.modules.get("torch")
        if v is None or type(v) in (bool, str):
            return v
        if isinstance(v, enum.Enum) and _ours(type(v)):
            return {"~": "enum", "cls": _class_path(type(v)), "v": self.value(v.value, depth + 1)}
        if np is not None and isinstance(v, np.generic):
            return self._numpy(np.asarray(v), "scalar")
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            f = float(v)
            return f if math.isfinite(f) else {"~": "float", "v": repr(f)}
        if isinstance(v, str):
            return str.__str__(v)
        if isinstance(v, bytes | bytearray | memoryview):
            return {"~": "bytes", "b": self._buffer(bytes(v))}
        if np is not None and isinstance(v, np.ndarray):
            return self._numpy(np.asarray(v), "array")
        if torch is not None and isinstance(v, torch.Tensor):
            return self._tensor(v, torch)
        if dataclasses.is_dataclass(v) and not isinstance(v, type) and _ours(type(v)):
            fields = {
                f.name: self.value(getattr(v, f.name), depth + 1)
                for f in dataclasses.fields(v)
                if f.init
            }
            return {"~": "dataclass", "cls": _class_path(type(v)), "v": fields}
        if isinstance(v, tuple) and hasattr(type(v), "_fields") and _ours(type(v)):
            items = [self.value(x, depth + 1) for x in tuple.__iter__(v)]
            return {"~": "namedtuple", "cls": _class_path(type(v)), "v": items}
        kind: type[Iterable[Any]]  # iterated with the built-in's own __iter__, not v's
        for kind, tag in ((tuple, "tuple"), (list, "list"), (frozenset, "frozenset"), (set, "set")):
            if isinstance(v, kind):
                return {"~": tag, "v": [self.value(x, depth + 1) for x in kind.__iter__(v)]}
        if isinstance(v, dict):
            pairs: ItemsView[Any, Any] = dict.items(v)
            return {
                "~": "dict",
                "v": [[self.value(k, depth + 1), self.value(x, depth + 1)] for k, x in pairs],
            }
        if isinstance(v, range | type({}.keys()) | type({}.values()) | type({}.items())):
            view: Iterable[Any] = v  # a range, or a dict view of any key and value types
            return {"~": "list", "v": [self.value(x, depth + 1) for x in view]}
        return {"~": "opaque", "type": _type_name(v)}

    def _numpy(self, a: Any, tag: str) -> Any:
        if a.dtype.hasobject or a.dtype.fields is not None or a.dtype.kind not in _NUMPY_KINDS:
            return {"~": "opaque", "type": f"a NumPy {tag} of dtype {a.dtype}"}
        node = {"~": tag, "dtype": a.dtype.str, "b": self._buffer(a.tobytes(order="C"))}
        if tag == "array":
            node["shape"] = [int(n) for n in a.shape]
        return node

    def _tensor(self, t: Any, torch: Any) -> Any:
        name = str(t.dtype).removeprefix("torch.")
        if name not in TORCH_DTYPES or t.layout != torch.strided or t.is_quantized:
            return {"~": "opaque", "type": f"a tensor of dtype {t.dtype}, layout {t.layout}"}
        device = str(t.device)
        flat = t.detach().to("cpu").contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        return {
            "~": "tensor",
            "dtype": name,
            "shape": [int(n) for n in t.shape],
            "device": device,
            "b": self._buffer(data),
        }

    def exception(self, err: BaseException) -> dict[str, Any]:
        """What the judge needs to raise `err` again: its class chain and arguments."""
        mro = [
            _class_path(k)
            for k in type(err).__mro__
            if issubclass(k, BaseException) and (k.__module__ == "builtins" or _ours(k))
        ]
        try:
            text = str(err)[:2000]
        except Exception:  # noqa: BLE001 - an exception whose str() fails still has a class
            text = ""
        return {"mro": mro, "args": self.value(tuple(err.args)), "text": text}


def _class_path(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def _resolve(path: Any, what: str) -> type:
    """The class `path` ("module:qualname") names, if it is a builtin or ours."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise WireError(f"a {what} names no class: {str(path)[:80]!r}")
    module, qualname = path.split(":")
    if not _QUALNAME.match(module) or not _QUALNAME.match(qualname):
        raise WireError(f"a {what} names an invalid class {path[:80]!r}")
    if any(part.startswith("__") for part in (*module.split("."), *qualname.split("."))):
        raise WireError(f"a {what} names {path[:80]!r}: no dunder names")
    if module != "builtins" and module != _PACKAGE and not module.startswith(_PACKAGE + "."):
        raise WireError(f"a {what} names {path[:80]!r}, which is not the course's class")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as err:
        raise WireError(f"a {what} names {path[:80]!r}, which does not exist here") from err
    if not isinstance(found, type):
        raise WireError(f"a {what} names {path[:80]!r}, which is not a class")
    return found


class Decoder:
    """JSON trees + buffers -> values, refusing anything but the forms `Encoder` writes."""

    def __init__(self, buffers: list[bytes]) -> None:
        self.buffers = buffers

    def _buffer(self, node: dict) -> bytes:
        index = node.get("b")
        if (
            not isinstance(index, int)
            or isinstance(index, bool)
            or not 0 <= index < len(self.buffers)
        ):
            raise WireError("a value points at a buffer that does not exist")
        return self.buffers[index]

    def value(self, node: Any, depth: int = 0) -> Any:
        """The value of `node`; `WireError` when it is not a well-formed tree."""
        if depth > MAX_DEPTH:
            raise WireError(f"values nested more than {MAX_DEPTH} deep")
        if node is None or isinstance(node, bool | int | float | str):
            return node
        if not isinstance(node, dict) or not isinstance(node.get("~"), str):
            raise WireError(f"an unknown value form ({type(node).__name__})")
        tag = node["~"]
        items = node.get("v")
        if tag in ("list", "tuple", "set", "frozenset"):
            if not isinstance(items, list):
                raise WireError(f"a {tag} without its items")
            values = [self.value(x, depth + 1) for x in items]
            kind = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag]
            try:
                return kind(values)
            except TypeError as err:
                raise WireError(f"a {tag} of unhashable items") from err
        if tag == "dict":
            if not isinstance(items, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in items
            ):
                raise WireError("a dict without its key-value pairs")
            try:
                return {self.value(k, depth + 1): self.value(x, depth + 1) for k, x in items}
            except TypeError as err:
                raise WireError("a dict with an unhashable key") from err
        if tag == "float":
            if items not in ("nan", "inf", "-inf"):
                raise WireError("a float that is not nan or an infinity")
            return float(items)
        if tag == "bytes":
            return self._buffer(node)
        if tag in ("array", "scalar"):
            return self._numpy(node, tag)
        if tag == "tensor":
            return self._tensor(node)
        if tag in ("dataclass", "namedtuple", "enum"):
            return self._ours(node, tag, depth)
        if tag == "opaque":
            return Opaque(str(node.get("type", "?"))[:200])
        raise WireError(f"an unknown value form {tag[:40]!r}")

    def _shape(self, node: dict) -> tuple[int, ...]:
        shape = node.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        ):
            raise WireError("an array with an invalid shape")
        return tuple(shape)

    def _numpy(self, node: dict, tag: str) -> Any:
        import numpy as np

        spec = node.get("dtype")
        if not isinstance(spec, str) or not re.match(r"^[<>|=]?[a-zA-Z]\d*(\[\w+\])?$", spec):
            raise WireError("an array with an invalid dtype")
        try:
            dtype = np.dtype(spec)
        except TypeError as err:
            raise WireError(f"an array with an unknown dtype {spec!r}") from err
        if dtype.hasobject or dtype.fields is not None or dtype.kind not in _NUMPY_KINDS:
            raise WireError(f"an array of dtype {spec!r}, which the judge does not accept")
        shape = self._shape(node) if tag == "array" else ()
        data = self._buffer(node)
        if math.prod(shape) * dtype.itemsize != len(data):
            raise WireError(f"an array of shape {shape} and dtype {dtype} with {len(data)} bytes")
        array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        return array if tag == "array" else array[()]

    def _tensor(self, node: dict) -> Any:
        import torch

        name = node.get("dtype")
        if name not in TORCH_DTYPES:
            raise WireError(
                f"a tensor of dtype {str(name)[:40]!r}, which the judge does not accept"
            )
        dtype = getattr(torch, name)
        shape = self._shape(node)
        data = self._buffer(node)
        size = torch.empty((), dtype=dtype).element_size()
        if math.prod(shape) * size != len(data):
            raise WireError(f"a tensor of shape {shape} and dtype {name} with {len(data)} bytes")
        if data:
            flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype)
        else:
            flat = torch.empty(0, dtype=dtype)
        tensor = flat.reshape(shape).clone()
        device = node.get("device")
        if isinstance(device, str) and re.match(r"^cuda(:\d+)?$", device):
            if torch.cuda.is_available():
                tensor = tensor.to(device)
        return tensor

    def _ours(self, node: dict, tag: str, depth: int) -> Any:
        kind = _resolve(node.get("cls"), tag)
        items = node.get("v")
        try:
            if tag == "enum":
                if not issubclass(kind, enum.Enum):
                    raise WireError(f"{kind.__qualname__} is not an enum")
                return kind(self.value(items, depth + 1))
            if tag == "namedtuple":
                if not (issubclass(kind, tuple) and hasattr(kind, "_fields")):
                    raise WireError(f"{kind.__qualname__} is not a named tuple")
                if not isinstance(items, list):
                    raise WireError("a named tuple without its items")
                return kind(*[self.value(x, depth + 1) for x in items])
            if not dataclasses.is_dataclass(kind) or not isinstance(items, dict):
                raise WireError(f"{kind.__qualname__} is not a dataclass, or has no fields")
            init = {f.name for f in dataclasses.fields(kind) if f.init}
            if not set(items) <= init:
                raise WireError(f"fields {sorted(set(items) - init)} are not {kind.__qualname__}'s")
            return kind(**{k: self.value(x, depth + 1) for k, x in items.items()})
        except WireError:
            raise
        except Exception as err:
            raise WireError(
                f"{kind.__qualname__} could not be rebuilt: {type(err).__name__}"
            ) from err

    def exception(self, node: Any) -> BaseException:
        """The exception `node` describes, as the judge should raise it."""
        if not isinstance(node, dict) or not isinstance(node.get("mro"), list):
            raise WireError("an exception without its classes")
        text = node.get("text") if isinstance(node.get("text"), str) else ""
        try:
            args = tuple(self.value(node.get("args")))
        except (WireError, TypeError):
            args = (text,)
        for path in node["mro"][:64]:
            try:
                kind = _resolve(path, "exception")
            except WireError:
                continue
            if not issubclass(kind, BaseException):
                continue
            try:
                return kind(*args)
            except Exception:  # noqa: BLE001 - a class that needs other arguments: next base
                continue
        return RuntimeError(text)


class Opaque:
    """A value that could not travel: any use of it in the judge fails with its type."""

    def __init__(self, type_name: str) -> None:
        object.__setattr__(self, "_type_name", type_name)

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise WireError(
            f"the judge got a {object.__getattribute__(self, '_type_name')} from your kernel, "
            "which it cannot check outside it: return plain values (numbers, strings, lists, "
            "tuples, dicts, NumPy arrays, tensors)"
        )

    __getattr__ = __call__ = __iter__ = __len__ = __bool__ = __getitem__ = _refuse
    __eq__ = __lt__ = __le__ = __gt__ = __ge__ = __float__ = __int__ = _refuse
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<a {object.__getattribute__(self, '_type_name')} from the student's kernel>"


def dump(header: dict[str, Any], buffers: list[bytes]) -> bytes:
    """`header` (JSON) and `buffers` in one byte string (see `load`)."""
    spans, offset = [], 0
    for data in buffers:
        spans.append([offset, len(data)])
        offset += len(data)
    text = json.dumps({"header": header, "buffers": spans}, allow_nan=True).encode("utf-8")
    return b"".join([MAGIC, struct.pack(">Q", len(text)), text, *buffers])


def load(data: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """(header, buffers) of a `dump`; `WireError` when `data` is not one."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise WireError("not a judge record (wrong start)")
    (size,) = struct.unpack(">Q", data[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8
    if size > min(MAX_HEADER_BYTES, len(data) - start):
        raise WireError(f"a header of {size} bytes in a record of {len(data)}")
    try:
        outer = json.loads(data[start : start + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise WireError(f"the record's header is not JSON ({type(err).__name__})") from err
    if not isinstance(outer, dict) or not isinstance(outer.get("header"), dict):
        raise WireError("the record has no header object")
    spans = outer.get("buffers")
    body = start + size
    if not isinstance(spans, list):
        raise WireError("the record has no buffer table")
    buffers = []
    for span in spans:
        if (
            not isinstance(span, list)
            or len(span) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in span)
            or body + span[0] + span[1] > len(data)
        ):
            raise WireError("a buffer lies outside the record")
        buffers.append(data[body + span[0] : body + span[0] + span[1]])
    return outer["header"], buffers
