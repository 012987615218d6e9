"""Configuration loading: sources, overrides and the errors that list every problem."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heron.config import ConfigError, load_config


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_project_file_overrides_user_file_and_flags_override_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    write(
        tmp_path / "cfg" / "heron" / "config.toml",
        '[agent]\nautonomy = "full"\nmax_iterations = 7\n',
    )
    write(
        tmp_path / "proj" / "heron.toml",
        "[agent]\nmax_iterations = 9\n[approval]\ntimeout_s = 30.0\n",
    )
    config = load_config(project_dir=tmp_path / "proj", overrides={"agent": {"parallel": "off"}})
    assert config.agent.autonomy == "full"
    assert config.agent.max_iterations == 9
    assert config.agent.parallel == "off"
    assert config.approval.timeout_s == 30.0
    knobs = config.knobs()
    assert (knobs.max_iterations, knobs.parallel) == (9, "off")


def test_unknown_keys_and_bad_values_are_all_reported_with_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    path = write(
        tmp_path / "heron.toml",
        '[agent]\nautonomy = "yolo"\nmax_iteration = 3\n[bogus]\nx = 1\n',
    )
    with pytest.raises(ConfigError) as info:
        load_config(project_dir=tmp_path)
    message = str(info.value)
    assert str(path) in message
    assert "unknown key 'agent.max_iteration'" in message
    assert "unknown key 'bogus'" in message
    assert "'agent.autonomy'" in message
    assert len(info.value.problems) == 3
    assert message.splitlines()[1:] == [f"- {problem}" for problem in info.value.problems]


def test_values_are_not_coerced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    write(tmp_path / "heron.toml", '[agent]\nmax_iterations = "10"\n')
    with pytest.raises(ConfigError, match=r"agent\.max_iterations"):
        load_config(project_dir=tmp_path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'[agent]\nmodel = "\xff\xfe"\n', "not UTF-8 text (byte 17)"),
        (b"x = " + b"[" * 3000 + b"]" * 3000 + b"\n", "values nested too deeply to read"),
        (b"# " + b"x" * (1024 * 1024) + b"\n", "at most 1,048,576 are read"),
    ],
    ids=["not-utf8", "nested", "too-large"],
)
def test_a_project_file_heron_cannot_read_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, problem: str
) -> None:
    # A project's heron.toml comes with the repository: each was a traceback before.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    (tmp_path / "heron.toml").write_bytes(content)
    with pytest.raises(ConfigError, match=re.escape(problem)):
        load_config(project_dir=tmp_path)


def test_invalid_toml_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    write(tmp_path / "heron.toml", "[agent\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(project_dir=tmp_path)
