"""Workspace path confinement and byte-exact I/O helpers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from heron.safety.workspace import (
    MAX_PATH_CHARS,
    Workspace,
    WorkspaceError,
    atomic_write,
    binary_kind,
    decode_utf8,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws" / "src").mkdir(parents=True)
    (tmp_path / "ws" / "src" / "app.py").write_text("print(1)\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return tmp_path / "ws"


def refusal(ws: Workspace, path: str, **kwargs: bool) -> WorkspaceError:
    with pytest.raises(WorkspaceError) as caught:
        ws.resolve(path, **kwargs)
    return caught.value


def test_relative_paths_resolve_to_real_paths_inside_the_root(root: Path) -> None:
    ws = Workspace(root)
    assert ws.resolve("src/app.py") == root.resolve() / "src" / "app.py"
    assert ws.resolve("./src//app.py") == root.resolve() / "src" / "app.py"
    assert ws.resolve(".") == ws.root
    assert ws.resolve("new/dir/file.txt") == root.resolve() / "new" / "dir" / "file.txt"


@pytest.mark.parametrize("path", ["../../etc/passwd", "src/../../outside/secret.txt", "..", "a/.."])
def test_dot_dot_traversal_is_refused_before_touching_the_disk(root: Path, path: str) -> None:
    error = refusal(Workspace(root), path)
    assert error.reason == "traversal"
    assert "'..'" in str(error)
    assert error.to_data()["error"] == "traversal"


@pytest.mark.parametrize("path", ["/etc/passwd", "//server/share"])
def test_absolute_paths_are_refused_with_a_hint(root: Path, path: str) -> None:
    error = refusal(Workspace(root), path)
    assert error.reason == "absolute_path"
    assert "relative to the workspace root" in str(error)


def test_nul_bytes_empty_and_oversize_paths_are_refused(root: Path) -> None:
    ws = Workspace(root)
    assert refusal(ws, "src/app.py\x00.txt").reason == "nul_byte"
    assert refusal(ws, "").reason == "empty_path"
    assert refusal(ws, "a/" * (MAX_PATH_CHARS // 2 + 1)).reason == "path_too_long"
    assert refusal(ws, "x" * 256).reason == "path_too_long"


def test_symlink_to_a_file_outside_is_refused(root: Path) -> None:
    (root / "leak.txt").symlink_to(root.parent / "outside" / "secret.txt")
    error = refusal(Workspace(root), "leak.txt")
    assert error.reason == "symlink_escape"
    assert "outside the workspace" in str(error)
    # The refusal does not reveal where the link points on the host.
    assert "outside/secret" not in str(error)


def test_symlinked_parent_pointing_outside_is_refused_for_a_new_file(root: Path) -> None:
    (root / "escape").symlink_to(root.parent / "outside", target_is_directory=True)
    error = refusal(Workspace(root), "escape/new/file.txt")
    assert error.reason == "symlink_escape"


def test_symlink_inside_the_workspace_is_followed_or_kept_on_request(root: Path) -> None:
    (root / "link.py").symlink_to(root / "src" / "app.py")
    ws = Workspace(root)
    assert ws.resolve("link.py") == ws.root / "src" / "app.py"
    assert ws.resolve("link.py", follow_symlinks=False) == ws.root / "link.py"


def test_must_exist_refuses_missing_paths(root: Path) -> None:
    error = refusal(Workspace(root), "src/missing.py", must_exist=True)
    assert error.reason == "not_found"
    assert "src/missing.py" in str(error)


def test_relative_gives_posix_paths_and_refuses_outside(root: Path) -> None:
    ws = Workspace(root)
    assert ws.relative(ws.root / "src" / "app.py") == "src/app.py"
    assert ws.relative(ws.root) == "."
    with pytest.raises(WorkspaceError) as caught:
        ws.relative(root.parent / "outside")
    assert caught.value.reason == "outside_workspace"


def test_root_must_be_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError) as caught:
        Workspace(tmp_path / "nope")
    assert caught.value.reason == "invalid_root"


def test_a_walk_skips_vcs_folders_and_lists_links_apart(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / "link.py").symlink_to(root / "src" / "app.py")
    ws = Workspace(root)
    walk = ws.walk(ws.root)
    assert [ws.relative(p) for p in walk.files] == ["src/app.py"]
    assert [ws.relative(p) for p in walk.links] == ["link.py"]
    assert walk.skipped_dirs == [".git"]
    assert [ws.relative(p) for p in ws.walk(ws.root / ".git").files] == [".git/HEAD"]


def test_atomic_write_keeps_permission_bits_and_leaves_no_temporary_file(root: Path) -> None:
    target = root / "run.sh"
    target.write_bytes(b"old")
    os.chmod(target, 0o750)
    atomic_write(target, b"#!/bin/sh\r\necho \xe2\x80\x9chi\xe2\x80\x9d")
    assert target.read_bytes() == b"#!/bin/sh\r\necho \xe2\x80\x9chi\xe2\x80\x9d"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert sorted(p.name for p in root.iterdir()) == ["run.sh", "src"]


def test_atomic_write_failure_leaves_the_old_file_and_no_temporary(root: Path) -> None:
    target = root / "dir-in-the-way"
    target.mkdir()
    (target / "child").write_text("x")
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert (target / "child").read_text() == "x"
    assert sorted(p.name for p in root.iterdir()) == ["dir-in-the-way", "src"]


def test_binary_sniffing_names_known_formats_and_nul_bytes() -> None:
    assert binary_kind(b"\x89PNG\r\n\x1a\n....") == "PNG image"
    assert binary_kind(b"abc\x00def") == "unknown binary data (contains NUL bytes)"
    assert binary_kind("caf\u00e9 \u201cquoted\u201d".encode()) is None


def test_strict_decoding_names_the_bad_byte_and_line_instead_of_replacing() -> None:
    decoded = decode_utf8(b"line one\nline two \xe9t\xe9\n")
    assert decoded.text is None
    assert decoded.problem is not None
    assert "byte(s) e9 at offset 18 (line 2)" in decoded.problem
    assert decode_utf8("\u00a0\u2019".encode()).text == "\u00a0\u2019"


def test_a_claimed_state_directory_inside_the_workspace_is_out_of_reach(tmp_path: Path) -> None:
    from heron._support.own_paths import claim_state_dir

    state = tmp_path / "ws" / ".local" / "state"
    (state / "receipt-keys").mkdir(parents=True)
    (state / "receipt-keys" / "k.key").write_text("00")
    (tmp_path / "ws" / "notes.txt").write_text("n")
    (tmp_path / "ws" / "link").symlink_to(state / "receipt-keys")
    ws = Workspace(tmp_path / "ws")
    assert ws.resolve(".local/state/receipt-keys/k.key")  # not claimed yet: an ordinary folder

    claim_state_dir(state)
    for path in (".local/state", ".local/state/receipt-keys/k.key", "link/k.key", "link"):
        with pytest.raises(WorkspaceError) as caught:
            ws.resolve(path)
        assert caught.value.reason == "heron_state"
    with pytest.raises(WorkspaceError, match="holds heron's own state directory"):
        ws.check_holds_no_state(ws.resolve(".local"), ".local")
    walked = ws.walk(ws.root)
    assert [p.name for p in walked.files] == ["notes.txt"] and walked.skipped_dirs == []

    # A workspace inside the state directory (`heron serve`'s job workspace) hides nothing.
    jobs = Workspace(state / "receipt-keys")
    assert jobs.state_dirs() == () and jobs.resolve("k.key").name == "k.key"
