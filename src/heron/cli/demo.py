"""`heron demo [quickstart|events|multimodal]`: the scripted tours (`heron.demo`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from heron.cli import common
from heron.cli.common import EXIT_ERROR, EXIT_OK


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `demo` to the `heron` parser."""
    demo = sub.add_parser(
        "demo",
        help="the demos: quick start, then the event-driven agent (scripted models, real tools)",
        description="Without a name: the quick start, then the events demo (with --events jsonl, "
        "the quick start alone, so each JSON stream is one demo's).",
    )
    demo.add_argument(
        "which",
        nargs="?",
        choices=["quickstart", "events", "multimodal"],
        help="run one demo: quickstart (tools, approval, receipts), events (background job on "
        "the event bus) or multimodal (one file through the three multimodal paths)",
    )
    demo.add_argument("--events", choices=["pretty", "jsonl"], default="pretty")
    demo.add_argument(
        "--workspace", type=Path, help="quickstart: where the demo writes (default: a temp dir)"
    )
    demo.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="events: seconds per step of the background build (default 1; 3 steps)",
    )
    demo.add_argument(
        "--file", type=Path, help="multimodal: the file to ask about (default: a sample PDF)"
    )
    demo.add_argument("--question", help="multimodal: the question to ask about the file")
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from heron.cli.render import JsonLinesRenderer, PrettyRenderer
    from heron.demo.events import run_events_demo
    from heron.demo.quickstart import Renderer, run_demo

    if args.which == "multimodal":
        return _multimodal(args.file, args.question, events=args.events)
    if args.which == "events":
        return run_events_demo(events=args.events, scale=args.time_scale)
    renderer: Renderer = JsonLinesRenderer() if args.events == "jsonl" else PrettyRenderer()
    code = run_demo(renderer=renderer, workspace=args.workspace)
    if args.which == "quickstart" or args.events == "jsonl" or code != EXIT_OK:
        return code
    common.out()
    return run_events_demo(events=args.events, scale=args.time_scale)


def _multimodal(file: Path | None, question: str | None, *, events: str) -> int:
    """`heron demo multimodal`: the given file, or a sample PDF (a PNG without reportlab)."""
    import tempfile

    from heron.demo.multimodal import (
        SAMPLE_LINES,
        SAMPLE_QUESTION,
        run_multimodal_demo,
        write_sample,
    )

    if file is not None:
        return run_multimodal_demo(file, question or SAMPLE_QUESTION, events=events)
    with tempfile.TemporaryDirectory(prefix="heron-demo-sample-") as scratch:
        sample = write_sample(Path(scratch))
        if sample is None:
            common.err(
                "the sample file needs reportlab (PDF) or Pillow (PNG), which come with "
                "the dev extras: pip install -e '.[dev]' (or run `make demo`), or pass --file"
            )
            return EXIT_ERROR
        sys.stderr.write(f"sample file: {sample.name} ({len(SAMPLE_LINES)} lines of text)\n")
        return run_multimodal_demo(sample, question or SAMPLE_QUESTION, events=events)
