"""The few ONNX protobuf messages an encoder graph needs, written without the `onnx` package.

`onnxruntime` runs a model given as serialised `ModelProto` bytes; building those bytes takes
a dozen fields of the public ONNX schema (onnx/onnx.proto), so heron writes them itself
instead of pulling in `onnx` and `protobuf` for one graph. Field numbers are the schema's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["FLOAT", "INT64", "Graph", "attribute", "model", "node", "tensor", "value_info"]

FLOAT, UINT8, INT8, INT64 = 1, 2, 3, 7
_ELEMENT = {
    np.dtype(np.float32): FLOAT,
    np.dtype(np.uint8): UINT8,
    np.dtype(np.int8): INT8,
    np.dtype(np.int64): INT64,
}
_VARINT, _FIXED32, _BYTES = 0, 5, 2
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7
_IR_VERSION = 8


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values are sent as their two's complement
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value)


def _bytes(field: int, value: bytes) -> bytes:
    return _key(field, _BYTES) + _varint(len(value)) + value


def _str(field: int, value: str) -> bytes:
    return _bytes(field, value.encode())


def tensor(name: str, array: npt.NDArray[np.generic]) -> bytes:
    """A `TensorProto` (an initializer) with the array's bytes as `raw_data`."""
    array = np.ascontiguousarray(array)
    dims = b"".join(_int(1, d) for d in array.shape)
    return dims + _int(2, _ELEMENT[array.dtype]) + _str(8, name) + _bytes(9, array.tobytes())


def attribute(name: str, value: int | float | Sequence[int]) -> bytes:
    """An `AttributeProto`: an int, a float or a list of ints."""
    if isinstance(value, bool | int):
        body = _int(3, int(value)) + _int(20, _ATTR_INT)
    elif isinstance(value, float):
        body = _key(2, _FIXED32) + struct.pack("<f", value) + _int(20, _ATTR_FLOAT)
    else:
        body = b"".join(_int(8, v) for v in value) + _int(20, _ATTR_INTS)
    return _str(1, name) + body


def node(
    op: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    *,
    domain: str = "",
    **attributes: int | float | Sequence[int],
) -> bytes:
    """A `NodeProto`; an empty input name marks an optional input left out."""
    body = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs)
    body += _str(4, op)
    body += b"".join(_bytes(5, attribute(k, v)) for k, v in attributes.items())
    return body + (_str(7, domain) if domain else b"")


def value_info(name: str, element: int, shape: Sequence[int | str]) -> bytes:
    """A graph input or output: element type and shape (a str is a symbolic dimension)."""
    dims = b"".join(_bytes(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in shape)
    tensor_type = _int(1, element) + _bytes(2, dims)
    return _str(1, name) + _bytes(2, _bytes(1, tensor_type))


class Graph:
    """Nodes and initializers collected in order, then serialised as one `GraphProto`."""

    def __init__(self) -> None:
        self._nodes: list[bytes] = []
        self._initializers: list[bytes] = []
        self._count = 0

    def constant(self, name: str, array: npt.NDArray[np.generic]) -> str:
        self._initializers.append(tensor(name, array))
        return name

    def add(
        self,
        op: str,
        *inputs: str,
        domain: str = "",
        outputs: int = 1,
        **attributes: int | float | Sequence[int],
    ) -> list[str]:
        """Append a node; returns its output names (fresh, numbered)."""
        self._count += 1
        names = [f"{op.lower()}{self._count}_{i}" for i in range(outputs)]
        self._nodes.append(node(op, inputs, names, domain=domain, **attributes))
        return names

    def serialise(self, inputs: Sequence[bytes], outputs: Sequence[bytes]) -> bytes:
        body = b"".join(_bytes(1, n) for n in self._nodes) + _str(2, "encoder")
        body += b"".join(_bytes(5, t) for t in self._initializers)
        body += b"".join(_bytes(11, v) for v in inputs) + b"".join(_bytes(12, v) for v in outputs)
        return body


def model(graph: bytes, opsets: dict[str, int]) -> bytes:
    """A `ModelProto` around a serialised graph, with its operator sets by domain."""
    body = _int(1, _IR_VERSION) + _str(2, "heron") + _bytes(7, graph)
    return body + b"".join(_bytes(8, _str(1, d) + _int(2, v)) for d, v in opsets.items())
