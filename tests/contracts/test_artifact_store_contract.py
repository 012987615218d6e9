"""A whole artifact store (catalog and contents): an artifact one store object wrote is read
page by page and searched through another (another worker of a shared store), deep inside a
content larger than a PostgreSQL chunk, and a purge through one removes it for both."""

from __future__ import annotations

import re

import pytest

from heron._support.patterns import OutsidePattern
from heron.artifacts.postgres_contents import CHUNK_BYTES
from heron.artifacts.store import ArtifactError, ArtifactSpill
from support.stores import StoreBackend


def numbered(count: int, width: int = 60) -> str:
    return "".join(f"{n:08d} {'x' * width}\n" for n in range(1, count + 1))


def test_a_large_artifact_written_by_one_store_is_read_page_by_page_through_another(
    backend: StoreBackend,
) -> None:
    text = numbered(60_000)  # about 4 MB: several chunks, lines crossing their borders
    assert len(text) > 3 * CHUNK_BYTES
    info = backend.artifacts().put(text, tool="shell", call_id="c1")
    reader = backend.artifacts()
    lines = text.splitlines()
    for offset in (1, 17_000, 59_990):
        page = reader.read(info.id, offset=offset, limit=20)
        assert [line.text for line in page.lines] == lines[offset - 1 : offset + 19][:20]
        assert page.lines[0].number == offset
    # The line that crosses the first chunk border comes back whole.
    border = text.count("\n", 0, CHUNK_BYTES) + 1
    [line] = reader.read(info.id, offset=border, limit=1).lines
    assert line.text == lines[border - 1]
    report = reader.grep(info.id, OutsidePattern(r"^000(17|59)9\d\d "), max_matches=5)
    assert report.total == 200
    assert [hit.line for hit in report.hits] == [17_900, 17_901, 17_902, 17_903, 17_904]


def test_the_same_output_twice_is_one_content_and_a_purge_removes_it_for_every_store(
    backend: StoreBackend,
) -> None:
    clock = [1000.0]
    writer = backend.artifacts(clock=lambda: clock[0])
    first = writer.put("same\noutput\n", tool="t", call_id="a", ttl_s=10)
    second = writer.put("same\noutput\n", tool="t", call_id="b", ttl_s=100)
    assert first.sha256 == second.sha256 and first.id != second.id
    clock[0] = 1050.0
    assert writer.purge_expired() == 1
    other = backend.artifacts(clock=lambda: clock[0])
    assert [line.text for line in other.read(second.id).lines] == ["same", "output"]
    clock[0] = 2000.0
    assert writer.purge_expired() == 1
    with pytest.raises(ArtifactError) as caught:
        other.read(second.id)
    assert caught.value.reason == "unknown"


def test_a_spilled_output_is_read_back_from_another_store(backend: StoreBackend) -> None:
    output = numbered(1000, width=10)
    preview = ArtifactSpill(backend.artifacts()).spill("shell", "c1", output)
    assert preview is not None
    found = re.search(r"art_[0-9a-f]{16}", preview)
    assert found is not None
    page = backend.artifacts().read(found.group(0), offset=500, limit=2)
    assert [line.text for line in page.lines] == output.splitlines()[499:501]
