"""heron's own files in the workspace: its state directory stays out of every tool's reach, and
its configuration changes only with an operator's yes.

The harness puts the state directory at `<scratch>/state` and runs heron in `<scratch>`, so the
workspace holds it — as running heron in the home directory with the default state directory
does. Its receipt keys are written by the first run (`--receipts`); the second run's scripted
model then tries every way in it has.
"""

from __future__ import annotations

import json
import shutil

import pytest

from heron.sandbox.confine import HostFacts
from support.cli import Heron


def _results(done_stdout: str) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for line in done_stdout.splitlines():
        event = json.loads(line)
        if event["type"] == "tool_result":
            found.setdefault(str(event["name"]), []).append(event)
    return found


@pytest.mark.parametrize("sandbox", ["process", "bwrap"])
def test_no_tool_reads_lists_or_changes_the_state_directory_inside_the_workspace(
    heron: Heron, sandbox: str
) -> None:
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host")
    if sandbox == "process" and not HostFacts.probe().namespaces:
        pytest.skip("no mount namespace for the process level on this host")
    flags = ("--builtin", "perception", "--builtin", "execution", "--sandbox", sandbox)
    first = heron.script("first.yaml", [{"text": "keys made"}])
    made = heron.run("run", "hi", "--model", first, "--receipts", *flags)
    assert made.code == 0, made.stdout + made.stderr
    keys = {p: p.read_bytes() for p in (heron.state_dir / "receipt-keys").iterdir()}
    assert keys
    secret = next(iter(keys.values())).decode().strip()

    calls = [
        {"name": "read_file", "arguments": {"path": "state/heron.db"}},
        {"name": "list_dir", "arguments": {"path": "."}},
        {"name": "grep_files", "arguments": {"pattern": secret[:16], "path": "."}},
        {"name": "move_path", "arguments": {"src": "state", "dst": "moved"}},
        {"name": "copy_path", "arguments": {"src": ".", "dst": "copy"}},
        {"name": "write_file", "arguments": {"path": "state/receipt-keys/x.key", "content": "0"}},
    ]
    shells = [
        "cat state/receipt-keys/* state/heron.db; ls -la state",
        "ln -s state/receipt-keys look; ln state/heron.db hard; true",
        "echo 0 > state/receipt-keys/forged.key",
    ]
    turns = [{"tool_calls": calls}]
    turns += [{"tool_calls": [{"name": "shell", "arguments": {"command": c}}]} for c in shells]
    key_name = next(iter(keys)).name
    turns += [{"tool_calls": [{"name": "read_file", "arguments": {"path": f"look/{key_name}"}}]}]
    model = heron.script("try.yaml", [*turns, {"text": "done"}])
    done = heron.run(
        "run", "look", "--model", model, "--autonomy", "full", *flags, "--events", "jsonl"
    )
    assert done.code == 0, done.stdout + done.stderr

    results = _results(done.stdout)
    # read_file twice: the database, then a key through the link a command made.
    refused = [*results["read_file"], *results["move_path"], *results["write_file"]]
    assert len(refused) == 4
    assert all(r["status"] == "error" for r in refused), refused
    assert all("heron's own state directory" in str(r["output"]) for r in refused)
    assert results["copy_path"][0]["status"] == "error"  # the workspace root: never copied
    listed = [e["name"] for e in results["list_dir"][0]["data"]["entries"]]  # type: ignore[index]
    assert "state" not in listed and "first.yaml" in listed
    grep = str(results["grep_files"][0]["output"])  # the script holding the pattern matches
    assert grep.startswith("1 match ") and "try.yaml:" in grep and "state/" not in grep
    cat, link, forge = results["shell"]
    assert secret not in str(cat["output"]) and "SQLite format" not in str(cat["output"])
    assert "No such file" in str(cat["output"])
    assert forge["status"] == "denied"  # by policy: a write into heron's state directory
    assert link["status"] == "ok"
    assert not (heron.root / "hard").exists()  # nothing to link to: the state looks empty

    # Nothing of the state directory changed or leaked into the workspace.
    assert {p: p.read_bytes() for p in (heron.state_dir / "receipt-keys").iterdir()} == keys
    assert not (heron.root / "moved").exists() and not (heron.root / "copy").exists()
    assert secret not in done.stdout


def test_a_tool_changes_heron_toml_or_a_tools_module_only_with_an_operator(heron: Heron) -> None:
    heron.tools()
    config = '[agent]\nautonomy = "full"\n\n[tools]\nmodules = ["tools.py"]\n'
    config += '[tools.builtin]\nsets = ["perception", "execution"]\n'
    heron.write("heron.toml", config)
    before = {name: (heron.root / name).read_bytes() for name in ("heron.toml", "tools.py")}
    calls = [
        {
            "name": "edit_file",
            "arguments": {"path": "heron.toml", "old_string": "full", "new_string": "full"},
        },
        {"name": "write_file", "arguments": {"path": "tools.py", "content": "import os\n"}},
        {"name": "move_path", "arguments": {"src": "heron.toml", "dst": "old.toml"}},
        {"name": "delete_path", "arguments": {"path": "tools.py"}},
        {"name": "shell", "arguments": {"command": "echo '[agent]' >> heron.toml"}},
        {"name": "write_file", "arguments": {"path": "notes.md", "content": "ok\n"}},
    ]
    model = heron.script("s.yaml", [{"tool_calls": calls}, {"text": "done"}])
    done = heron.run("run", "go", "--model", model, "--events", "jsonl")

    assert done.code == 0, done.stdout + done.stderr
    statuses = [(r["name"], r["status"]) for rs in _results(done.stdout).values() for r in rs]
    assert sorted(statuses) == sorted(
        [(c["name"], "denied") for c in calls[:-1]] + [("write_file", "ok")]
    )
    assert {name: (heron.root / name).read_bytes() for name in before} == before
    assert (heron.root / "notes.md").read_text() == "ok\n"


def test_a_project_file_that_does_not_exist_yet_is_protected_too(heron: Heron) -> None:
    # Where the next start would read its configuration: creating it is as strong as editing it.
    calls = [
        {"name": "write_file", "arguments": {"path": "heron.toml", "content": "[agent]\n"}},
        {
            "name": "download_file",
            "arguments": {"url": "http://127.0.0.1:9/", "path": "heron.toml"},
        },
    ]
    model = heron.script("s.yaml", [{"tool_calls": calls}, {"text": "done"}])
    flags = ("--builtin", "execution", "--builtin", "perception", "--autonomy", "full")
    flags += ("--events", "jsonl")
    done = heron.run("run", "go", "--model", model, *flags)

    assert done.code == 0, done.stdout + done.stderr
    results = _results(done.stdout)
    assert [r["status"] for r in results["write_file"] + results["download_file"]] == ["denied"] * 2
    assert not (heron.root / "heron.toml").exists()
