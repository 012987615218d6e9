"""What the PostgreSQL artifact contents add to the contract: a bound on what enters the
shared database (an oversize output's spill says it could not be saved, and nothing is
stored), and a content gone from behind its row reads as missing, never as garbage."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heron._support.postgres import Pool, open_pool
from heron.artifacts.postgres_contents import CHUNK_BYTES, PostgresArtifactContents
from heron.artifacts.postgres_store import PostgresArtifactCatalog
from heron.artifacts.store import ArtifactError, ArtifactSpill, ArtifactStore
from support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here


@pytest.fixture
def pool(postgres_url: str) -> Iterator[Pool]:
    opened = open_pool(postgres_url, max_size=4)
    try:
        yield opened
    finally:
        opened.close()


def test_an_output_over_the_limit_is_refused_and_the_preview_says_so(pool: Pool) -> None:
    contents = PostgresArtifactContents(pool, max_bytes=10_000)
    store = ArtifactStore(PostgresArtifactCatalog(pool), contents)
    output = "".join(f"line {n}\n" for n in range(5000))  # about 44 KB
    preview = ArtifactSpill(store).spill("shell", "c1", output)
    assert preview is not None and "the full output could not be saved" in preview
    assert "over the shared store's limit of 10,000 bytes" in preview
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM artifact_chunks").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM artifacts").fetchone() == (0,)


def test_a_content_dropped_behind_its_row_reads_as_missing(pool: Pool) -> None:
    contents = PostgresArtifactContents(pool)
    store = ArtifactStore(PostgresArtifactCatalog(pool), contents)
    info = store.put("x" * (3 * CHUNK_BYTES) + "\nend\n", tool="t", call_id="c")
    contents.drop(info.sha256)
    with pytest.raises(ArtifactError) as caught:
        store.read(info.id)
    assert caught.value.reason == "missing"
    assert "the shared store" in str(caught.value)
