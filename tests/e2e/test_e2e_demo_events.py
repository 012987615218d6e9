"""`heron demo events` and `heron demo multimodal`: the real command, scripted models."""

from __future__ import annotations

from support.cli import Heron


def test_demo_events_answers_the_time_during_the_job_and_the_result_in_japanese_after_it(
    heron: Heron,
) -> None:
    done = heron.run("demo", "events", "--events", "jsonl", "--time-scale", "0.5")

    assert done.code == 0, done.stdout + done.stderr
    events = done.events()
    assert events[0]["type"] == "demo" and events[0]["model"] == "scripted"
    assert events[-1] == {"type": "demo_done", "ok": True, "problems": []}
    finals = [i for i, e in enumerate(events) if e["type"] == "final"]
    [exit_at] = [i for i, e in enumerate(events) if e.get("kind") == "job.exit"]
    [time_at] = [i for i in finals if events[i]["text"].startswith("It is ")]
    japanese_at = next(i for i in finals if i > exit_at)

    assert time_at < exit_at
    assert any(e.get("text") == "reply in Japanese" for e in events[time_at:exit_at])
    assert "completed: exit code 0" in events[exit_at]["text"]
    result = events[japanese_at]["text"]
    assert "完了しました" in result and "build ok: 3 modules, 0 errors" in result
    assert [e["name"] for e in events if e["type"] == "tool_call"] == ["start_job"]


def test_demo_multimodal_compares_the_three_paths_on_a_generated_sample(heron: Heron) -> None:
    done = heron.run("demo", "multimodal")

    assert done.code == 0, done.stdout + done.stderr
    assert "sample file: report.pdf" in done.stderr
    rows = [line.split("│")[1].strip() for line in done.stdout.splitlines() if "│" in line]
    assert [row for row in rows if row] == ["native", "extract", "tool"]
    assert "Revenue grew" in done.stdout  # read from the PDF by the extract and tool paths
