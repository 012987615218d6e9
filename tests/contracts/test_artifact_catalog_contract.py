"""`ArtifactCatalog`: artifact rows with their line index, and the content operations of the
store run inside the catalog's atomic steps."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from heron.artifacts.store import ArtifactCatalog, ArtifactInfo
from support.stores import StoreBackend


@pytest.fixture
def catalog(backend: StoreBackend) -> ArtifactCatalog:
    return backend.artifact_catalog()


def info(artifact_id: str, sha256: str, *, expires: float = 200.0) -> ArtifactInfo:
    return ArtifactInfo(
        id=artifact_id,
        sha256=sha256,
        tool="shell",
        call_id=f"call-{artifact_id}",
        size=12,
        lines=1,
        created=100.0,
        expires=expires,
    )


def published(log: list[str], name: str) -> Callable[[], None]:
    return lambda: log.append(f"publish {name}")


def test_a_row_reads_back_with_its_line_index_through_another_catalog(
    catalog: ArtifactCatalog, backend: StoreBackend
) -> None:
    log: list[str] = []
    index = bytes(range(16))
    catalog.add(info("art_1", "aaa"), index, publish=published(log, "aaa"))
    assert log == ["publish aaa"]
    assert backend.artifact_catalog().get("art_1") == (info("art_1", "aaa"), index)
    assert catalog.get("art_2") is None


def test_a_failing_publish_stores_nothing(catalog: ArtifactCatalog) -> None:
    def fail() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        catalog.add(info("art_1", "aaa"), b"", publish=fail)
    assert catalog.get("art_1") is None


def test_content_is_dropped_only_when_no_row_refers_to_it(catalog: ArtifactCatalog) -> None:
    dropped: list[str] = []
    catalog.add(info("art_1", "shared"), b"", publish=lambda: None)
    catalog.add(info("art_2", "shared"), b"", publish=lambda: None)
    catalog.add(info("art_3", "alone"), b"", publish=lambda: None)
    catalog.remove("art_1", drop=dropped.append)
    assert dropped == [] and catalog.get("art_1") is None
    catalog.remove("art_2", drop=dropped.append)
    catalog.remove("art_3", drop=dropped.append)
    assert sorted(dropped) == ["alone", "shared"]
    catalog.remove("art_9", drop=dropped.append)  # unknown: nothing happens
    assert sorted(dropped) == ["alone", "shared"]


def test_remove_expired_removes_rows_due_and_drops_unreferenced_content(
    catalog: ArtifactCatalog,
) -> None:
    dropped: list[str] = []
    catalog.add(info("art_1", "shared", expires=150.0), b"", publish=lambda: None)
    catalog.add(info("art_2", "shared", expires=300.0), b"", publish=lambda: None)
    catalog.add(info("art_3", "alone", expires=150.0), b"", publish=lambda: None)
    assert catalog.remove_expired(150.0, drop=dropped.append) == 2
    assert dropped == ["alone"]
    assert catalog.get("art_2") is not None and catalog.get("art_1") is None
    assert catalog.remove_expired(150.0, drop=dropped.append) == 0
