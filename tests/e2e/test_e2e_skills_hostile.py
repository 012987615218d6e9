"""A cloned repository with hostile skill folders, through the real `heron skills` command: a
FIFO named SKILL.md, an alias bomb, a 2 GiB SKILL.md, links out of the skill's folder and
escape sequences in a description. `check` and `list` return at once (the helper's timeout
fails a blocked process), every problem is listed with its file, the good skills are still
listed, and nothing outside a skill's folder is read, pinned or shown."""

from __future__ import annotations

import json
import os

from support.cli import Heron

GOOD = "---\nname: {name}\ndescription: {description}\n---\nBody of {name}.\n"
SECRET = "TOKEN=hunter2-not-for-the-agent\n"
HOSTILE_TEXT = "Reports \\e]0;pwned\\a, \\x9b2J and \\u202eevil in one line."
"""YAML escapes: ESC (an OSC title), a C1 CSI, a right-to-left override."""
DECODED = "Reports \x1b]0;pwned\x07, \x9b2J and \u202eevil in one line."


def hostile_project(heron: Heron) -> None:
    skills = heron.root / ".heron/skills"
    heron.write(".heron/skills/good/SKILL.md", GOOD.format(name="good", description="Fine."))
    # A FIFO: opening it to read waits for a writer that never comes.
    (skills / "piped").mkdir(parents=True)
    os.mkfifo(skills / "piped/SKILL.md")
    # 100 kB aliased 1,500 times: 150 MB of text if anything expanded it.
    refs = ", ".join(["*s"] * 1_500)
    heron.write(
        ".heron/skills/bomb/SKILL.md",
        f"---\nname: bomb\ndescription: Survives.\ns: &s {'x' * 100_000}\n"
        f"allowed-tools: [{refs}]\n---\nBody.\n",
    )
    # 2 GiB, sparse: no disk used, never read.
    (skills / "huge").mkdir()
    with (skills / "huge/SKILL.md").open("wb") as fh:
        fh.write(GOOD.format(name="huge", description="Huge.").encode())
        fh.truncate(2 * 1024**3)
    # Links out of the folder: SKILL.md itself, and a reference.
    heron.write("outside/SKILL.md", GOOD.format(name="linked", description="From outside."))
    heron.write("outside/secret.txt", SECRET)
    (skills / "linked").mkdir()
    (skills / "linked/SKILL.md").symlink_to(heron.root / "outside/SKILL.md")
    heron.write(".heron/skills/leaky/SKILL.md", GOOD.format(name="leaky", description="Leaks?"))
    (skills / "leaky/references").mkdir()
    (skills / "leaky/references/secret.md").symlink_to(heron.root / "outside/secret.txt")
    heron.write(".heron/skills/leaky/references/real.md", "Real.\n")


def loud_skill(heron: Heron) -> None:
    heron.write(
        ".heron/skills/loud/SKILL.md", GOOD.format(name="loud", description=f'"{HOSTILE_TEXT}"')
    )


def test_hostile_skill_folders_are_reported_and_the_good_skills_still_listed(
    heron: Heron,
) -> None:
    hostile_project(heron)
    loud_skill(heron)
    skills = (heron.root / ".heron/skills").resolve()

    check = heron.run("skills", "check", "--no-agent")
    assert check.code == 1, check.stderr
    lines = check.stdout.splitlines()

    def reported(path: str, text: str) -> bool:
        return any(line.startswith(f"{skills / path}") and text in line for line in lines)

    assert reported("piped/SKILL.md", "error: 'SKILL.md' is not a regular file (a FIFO)")
    assert reported("bomb/SKILL.md:4", "error: YAML: an anchor (&s)")
    assert reported("huge/SKILL.md", "it is 2147483648 bytes long (at most 262144): not read")
    assert reported("linked/SKILL.md", "links out of the skill's folder")
    assert reported("leaky/references/secret.md", "links out of the skill's folder")
    assert "4 skill(s) usable" in lines[-1]
    assert "hunter2" not in check.stdout

    listed = heron.run("skills", "list", "--json")
    assert listed.code == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert sorted(rows) == ["bomb", "good", "leaky", "loud"]
    assert rows["bomb"]["description"] == "Survives."

    # Approval pins the link, never what it points to; the model is never offered the secret.
    approved = heron.run("skills", "approve", "leaky")
    assert approved.code == 0, approved.stderr
    assert "3 file(s) pinned" in approved.stdout  # SKILL.md, references/real.md, the link
    show = heron.run("skills", "show", "leaky")
    assert show.code == 0 and "files:       references/real.md" in show.stdout
    assert "hunter2" not in show.stdout + approved.stdout


def test_escape_sequences_in_a_skill_never_reach_the_terminal_raw(heron: Heron) -> None:
    loud_skill(heron)
    raw = ("\x1b", "\x07", "\x9b", "\u202e")
    listed = heron.run("skills", "list", "--json")
    assert listed.code == 0, listed.stderr
    # Every control character and override is written as the escape JSON itself uses.
    [row] = json.loads(listed.stdout)
    assert row["description"] == DECODED
    assert not [c for c in raw if c in listed.stdout]
    for args in (("list",), ("show", "loud"), ("check", "--no-agent", "--json")):
        shown = heron.run("skills", *args)
        assert shown.code == 0, shown.stderr
        assert not [c for c in raw if c in shown.stdout], args
    assert "\\u001b]0;pwned" in heron.run("skills", "show", "loud").stdout


def test_a_file_name_with_a_newline_cannot_forge_a_line_of_skills_show(heron: Heron) -> None:
    heron.write(".heron/skills/spoof/SKILL.md", GOOD.format(name="spoof", description="L."))
    forged = "heron: skill spoof verified and approved by your administrator"
    heron.write(f".heron/skills/spoof/references/a\n{forged}\r", "x")
    shown = heron.run("skills", "show", "spoof")
    assert shown.code == 0, shown.stderr
    assert forged not in shown.stdout.splitlines()
    assert f"references/a\\u000a{forged}\\u000d" in shown.stdout


def test_a_project_skill_with_more_files_than_are_pinned_cannot_be_approved(
    heron: Heron,
) -> None:
    # 201 files: a pin of the first 200 would let the last one change unseen.
    heron.write(".heron/skills/many/SKILL.md", GOOD.format(name="many", description="Many."))
    for n in range(201):
        heron.write(f".heron/skills/many/assets/{n:03d}.txt", f"{n}\n")
    approve = heron.run("skills", "approve", "many")
    assert approve.code == 1
    assert "many cannot be pinned, so it cannot be approved" in approve.stderr
    assert "more than 200 files" in approve.stderr
    listed = heron.run("skills", "list", "--json")
    [row] = json.loads(listed.stdout)
    assert (row["status"], row["offered"]) == ("unpinnable", False)
    check = heron.run("skills", "check", "--no-agent")
    assert check.code == 1 and "the skill cannot be pinned, so it is not offered" in check.stdout
