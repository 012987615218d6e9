"""Hostile skill folders: a cloned repository's `.heron/skills/` is outside input until checked.

A `SKILL.md` that is a FIFO, a device, an alias bomb, deeply nested YAML, a tag asking for a
Python object, a link out of its folder; files that cannot be read for the pin; a root with
more folders than heron reads. Each is reported as a `Problem` naming the file, loading keeps
what it can, and nothing blocks, expands or raises."""

from __future__ import annotations

import asyncio
import errno
import io
import os
from pathlib import Path
from typing import Any

import pytest

from heron.skills import (
    SkillCatalogue,
    SkillTrust,
    check_skills,
    find_skills,
    load_skills,
    parse_skill,
    skill_tools,
)
from heron.skills import finder as finder_module
from heron.skills.finder import SkillRoot
from heron.skills.trust import skill_definitions
from heron.tools.definition import ToolContext
from support.stores import SqliteBackend
from support.swaps import returns_promptly

GOOD = "---\nname: {name}\ndescription: A good skill.\n---\nBody.\n"


def skill_dir(root: Path, name: str, text: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    if text is not None:
        (folder / "SKILL.md").write_text(text, encoding="utf-8")
    return folder


# -- SKILL.md: only a regular file, of bounded size, inside its folder ------------------------


def test_a_fifo_named_skill_md_is_reported_and_never_blocks(tmp_path: Path) -> None:
    folder = skill_dir(tmp_path, "piped")
    os.mkfifo(folder / "SKILL.md")
    skill, problems = returns_promptly(lambda: parse_skill(folder, "project"), folder / "SKILL.md")
    assert skill is None
    [problem] = problems
    assert problem.path == folder / "SKILL.md" and problem.severity == "error"
    assert "not a regular file (a FIFO)" in problem.message
    # Through the finder too: reported as what it is, not as a folder without SKILL.md.
    skill_dir(tmp_path, "good", GOOD.format(name="good"))
    scan = returns_promptly(lambda: find_skills([SkillRoot(path=tmp_path, source="project")]))
    assert [s.name for s in scan.skills] == ["good"]
    assert any("not a regular file (a FIFO)" in p.message for p in scan.problems)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_device_named_skill_md_is_never_read(tmp_path: Path) -> None:
    # /dev/zero's numbers: a stat says 0 bytes, a read never ends.
    import stat

    folder = skill_dir(tmp_path, "zero")
    os.mknod(folder / "SKILL.md", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    skill, problems = returns_promptly(lambda: parse_skill(folder, "project"))
    assert skill is None and "not a regular file (a character device)" in problems[0].message


def test_an_oversize_skill_md_is_refused_from_its_size_without_reading_it(tmp_path: Path) -> None:
    folder = skill_dir(tmp_path, "huge")
    with (folder / "SKILL.md").open("wb") as fh:  # sparse: 2 GiB, no disk used
        fh.write(GOOD.format(name="huge").encode())
        fh.truncate(2 * 1024**3)
    skill, problems = returns_promptly(lambda: parse_skill(folder, "project"))
    assert skill is None
    assert problems[0].message == "it is 2147483648 bytes long (at most 262144): not read"


def test_a_skill_md_that_links_out_of_its_folder_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.md"
    outside.write_text(GOOD.format(name="linked"))
    folder = skill_dir(tmp_path / "skills", "linked")
    (folder / "SKILL.md").symlink_to(outside)
    skill, problems = parse_skill(folder, "project")
    assert skill is None
    assert "links out of the skill's folder" in problems[0].message
    # A link that stays inside the folder is followed.
    inner = skill_dir(tmp_path / "skills", "inner")
    (inner / "real.md").write_text(GOOD.format(name="inner"))
    (inner / "SKILL.md").symlink_to("real.md")
    skill, problems = parse_skill(inner, "project")
    assert skill is not None and problems == []


def test_a_project_skill_folder_that_links_out_of_the_project_is_not_read(
    tmp_path: Path,
) -> None:
    project, elsewhere = tmp_path / "repo", tmp_path / "home"
    skill_dir(elsewhere, "notes", GOOD.format(name="notes"))
    (elsewhere / "notes" / "diary.md").write_text("private")
    skills = project / ".heron/skills"
    skill_dir(skills, "own", GOOD.format(name="own"))
    (skills / "notes").symlink_to(elsewhere / "notes")
    skill_dir(project / "lib", "shared", GOOD.format(name="shared"))
    (skills / "shared").symlink_to("../../lib/shared")  # a link inside the project is followed
    (project / ".agents").mkdir()
    (project / ".agents/skills").symlink_to(elsewhere)  # the whole folder of skills, too
    roots, _ = finder_module.skill_roots(project, user_dir=tmp_path / "none", packages=False)
    scan = find_skills(roots)
    assert [s.name for s in scan.skills] == ["own", "shared"]
    refused = sorted(
        (p.path, p.severity) for p in scan.problems if "links out of the project" in p.message
    )
    assert refused == [
        (project / ".agents/skills/notes", "error"),
        (skills / "notes", "error"),
    ]
    assert f"(to {(elsewhere / 'notes').resolve()})" in scan.problems[0].message
    # A user's own folder of skills may link anywhere: it is the user's.
    user = find_skills([SkillRoot(path=skills, source="user")])
    assert sorted(s.name for s in user.skills) == ["notes", "own", "shared"]


# -- the front matter: a bounded YAML loader --------------------------------------------------


def test_yaml_aliases_are_refused_so_a_small_file_never_becomes_a_huge_value(
    tmp_path: Path,
) -> None:
    # 100 kB of text, referred to 1,500 times: 150 MB of strings once the aliases expand.
    text = "x" * 100_000
    refs = ", ".join(["*s"] * 1_500)
    keys = "\n".join(f"  k{n}: *s" for n in range(1_000))
    folder = skill_dir(
        tmp_path,
        "bomb",
        f"---\nname: bomb\ndescription: Fine.\ns: &s {text}\nallowed-tools: [{refs}]\n"
        f"metadata:\n{keys}\n---\nBody.\n",
    )
    skill, problems = parse_skill(folder, "project")
    assert skill is not None and skill.description == "Fine."  # recovered line by line
    held = sum(map(len, skill.allowed_tools or ())) + sum(map(len, skill.metadata.values()))
    assert held < 300_000  # at most the file's own text, never its expansion
    refused = [p for p in problems if "alias" in p.message]
    assert refused and refused[0].severity == "error" and refused[0].line == 4
    assert refused[0].path == folder / "SKILL.md"


def test_nesting_is_bounded_and_reported_with_its_line(tmp_path: Path) -> None:
    nested = "metadata: " + "{a: " * 20 + "1" + "}" * 20
    folder = skill_dir(
        tmp_path, "nested", f"---\nname: nested\ndescription: Fine.\n{nested}\n---\nBody.\n"
    )
    skill, problems = parse_skill(folder, "project")
    assert skill is not None and skill.description == "Fine."
    [deep] = [p for p in problems if "nested more than 16 levels" in p.message]
    assert deep.line == 4 and deep.severity == "error"
    # 100,000 levels: refused at the 17th, in no time, never a RecursionError.
    folder = skill_dir(
        tmp_path, "abyss", "---\nname: abyss\ndescription: " + "[" * 100_000 + "\n---\nBody.\n"
    )
    _, problems = returns_promptly(lambda: parse_skill(folder, "project"))
    assert any("nested more than 16 levels" in p.message for p in problems)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("!!python/object/apply:os.system ['echo pwned']", "!!python/object/apply:os.system"),
        ("!!python/name:os.system", "!!python/name:os.system"),
        ("!!binary aGVsbG8=", "!!binary"),
        ("!custom thing", "!custom"),
    ],
)
def test_tags_other_than_plain_yaml_types_are_refused(
    tmp_path: Path, value: str, shown: str
) -> None:
    folder = skill_dir(
        tmp_path, "tagged", f"---\nname: tagged\ndescription: Fine.\nlicense: {value}\n---\nB.\n"
    )
    skill, problems = parse_skill(folder, "project")
    assert skill is not None and skill.description == "Fine."
    [tag] = [p for p in problems if "tag" in p.message]
    assert shown in tag.message and "not read" in tag.message and tag.line == 4


def test_a_number_python_refuses_to_convert_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    folder = skill_dir(
        tmp_path, "digits", "---\nname: digits\ndescription: " + "1" * 5_000 + "\n---\nBody.\n"
    )
    skill, problems = parse_skill(folder, "project")
    assert problems and problems[0].line == 3 and "5000 digits" in problems[0].message
    assert skill is not None and skill.description.startswith("111")


# -- files of the skill: links out are not listed, pinned or read -----------------------------


def escaping_skill(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    folder = skill_dir(tmp_path / "skills", "leaky", GOOD.format(name="leaky"))
    (folder / "references").mkdir()
    (folder / "references/real.md").write_text("Real.\n")
    (folder / "references/alias.md").symlink_to("real.md")
    (folder / "references/secret.md").symlink_to(secret)
    (folder / "references/etc").symlink_to("/etc")
    return folder


def test_links_out_of_the_folder_are_not_listed_pinned_or_read(tmp_path: Path) -> None:
    folder = escaping_skill(tmp_path)
    skill, problems = parse_skill(folder, "project")
    assert skill is not None
    assert skill.files() == ["references/alias.md", "references/real.md"]
    warned = [p for p in problems if "links out of the skill's folder" in p.message]
    assert {p.path for p in warned} == {folder / "references/secret.md", folder / "references/etc"}
    pinned = {d.name: d.description for d in skill_definitions(skill)}
    assert "hunter2" not in "".join(pinned.values())
    assert pinned["references/secret.md"].startswith("a link out of the skill's folder, to ")

    [_, read] = skill_tools(SkillCatalogue([skill]))[0]
    ctx = ToolContext(call_id="c", turn_id="t")

    def ask(path: str) -> Any:
        return asyncio.run(read.execute({"name": "leaky", "path": path}, ctx))

    assert ask("references/alias.md").output == "Real.\n"
    for path, why in (
        ("references/secret.md", "links out of the skill's folder"),
        ("references/etc/hostname", "links out of the skill's folder"),
        ("../leaky/references/real.md", "'..'"),
        (str(folder / "references/real.md"), "an absolute path"),
        ("references/real.md\x00.png", "a NUL byte"),
    ):
        result = ask(path)
        assert not result.success, path
        assert "not a file inside the skill's folder" in (result.error or ""), path
        assert why in (result.error or ""), path


def test_a_fifo_among_the_files_is_not_listed_and_read_skill_file_refuses_it(
    tmp_path: Path,
) -> None:
    folder = skill_dir(tmp_path, "piped", GOOD.format(name="piped"))
    os.mkfifo(folder / "pipe")
    skill, problems = parse_skill(folder, "user")
    assert skill is not None and skill.files() == []
    assert any("not a regular file (a FIFO)" in p.message for p in problems)
    [_, read] = skill_tools(SkillCatalogue([skill]))[0]
    ctx = ToolContext(call_id="c", turn_id="t")
    result = returns_promptly(
        lambda: asyncio.run(read.execute({"name": "piped", "path": "pipe"}, ctx)), folder / "pipe"
    )
    assert not result.success and "not a regular file" in (result.error or "")


@pytest.mark.parametrize("hidden", [".notes.md", ".git/config", "refs/.draft.md"])
async def test_read_skill_file_refuses_hidden_files_which_are_neither_listed_nor_pinned(
    tmp_path: Path, hidden: str
) -> None:
    folder = skill_dir(tmp_path, "quiet", GOOD.format(name="quiet"))
    (folder / hidden).parent.mkdir(parents=True, exist_ok=True)
    (folder / hidden).write_text("changed after the approval, unseen\n")
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "shown.md").write_text("listed and pinned\n")
    skill, _ = parse_skill(folder, "project")
    assert skill is not None and skill.files() == ["refs/shown.md"]
    [_, read] = skill_tools(SkillCatalogue([skill]))[0]
    ctx = ToolContext(call_id="c", turn_id="t")

    refused = await read.execute({"name": "quiet", "path": hidden}, ctx)
    shown = await read.execute({"name": "quiet", "path": "./refs/shown.md"}, ctx)

    assert not refused.success and "hidden files are not part of a skill" in str(refused.error)
    assert shown.success and shown.output == "listed and pinned\n"


# -- a bound on the folders of one root -------------------------------------------------------


def test_a_root_with_more_folders_than_the_bound_reports_the_rest_as_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finder_module, "MAX_SKILLS_PER_ROOT", 3, raising=False)
    for n in range(5):
        skill_dir(tmp_path, f"s{n}", GOOD.format(name=f"s{n}"))
    scan = find_skills([SkillRoot(path=tmp_path, source="user")])
    assert [s.name for s in scan.skills] == ["s0", "s1", "s2"]
    [left] = [p for p in scan.problems if "left out" in p.message]
    assert left.path == tmp_path and left.severity == "error"
    assert "2 more folder(s)" in left.message and "s3, s4" in left.message


def test_the_bound_is_a_thousand_folders() -> None:
    assert finder_module.MAX_SKILLS_PER_ROOT == 1000


# -- pinning fails closed ---------------------------------------------------------------------


def unreadable(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Opening `path` fails with EACCES, as for a file mode 000 (the tests may run as root)."""
    real_os_open, real_io_open, real_scandir = os.open, io.open, os.scandir

    def denied(target: Any) -> bool:
        return isinstance(target, str | os.PathLike) and os.path.realpath(target) == str(path)

    def os_open(target: Any, *args: Any, **kwargs: Any) -> int:
        if denied(target):
            raise PermissionError(errno.EACCES, "Permission denied", str(target))
        return real_os_open(target, *args, **kwargs)

    def io_open(target: Any, *args: Any, **kwargs: Any) -> Any:
        if denied(target):
            raise PermissionError(errno.EACCES, "Permission denied", str(target))
        return real_io_open(target, *args, **kwargs)

    def scandir(target: Any = ".") -> Any:
        if denied(target):
            raise PermissionError(errno.EACCES, "Permission denied", str(target))
        return real_scandir(target)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    monkeypatch.setattr(os, "scandir", scandir)


@pytest.mark.parametrize("blocked", ["scripts/tool", "scripts"])
def test_a_skill_whose_files_cannot_be_pinned_is_withheld_and_cannot_be_approved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocked: str
) -> None:
    project = tmp_path / "project"
    folder = skill_dir(project / ".heron/skills", "tooling", GOOD.format(name="tooling"))
    (folder / "scripts").mkdir()
    (folder / "scripts/tool").write_text("#!/bin/sh\necho hi\n")
    trust = SkillTrust(SqliteBackend(tmp_path / "state").trust())
    unreadable(monkeypatch, (folder / blocked).resolve())

    loaded = load_skills(project, trust=trust, user_dir=tmp_path / "none", packages=False)
    assert len(loaded.catalogue) == 0
    [(skill, verdict)] = loaded.withheld
    assert verdict.status == "unpinnable" and not verdict.ok
    assert any(blocked in reason and "cannot be read" in reason for reason in verdict.problems)
    assert any("cannot be pinned" in n for n in loaded.notices)
    with pytest.raises(Exception, match="cannot be pinned") as refused:
        trust.approve(skill)
    from heron.errors import HeronError

    assert isinstance(refused.value, HeronError)
    scan = find_skills([SkillRoot(path=project / ".heron/skills", source="project")])
    problems = check_skills(scan)
    assert any(p.severity == "error" and "cannot be pinned" in p.message for p in problems)
