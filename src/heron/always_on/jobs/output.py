"""Reading a job's output file: a byte range decoded without cutting a character, the last
lines, the size so far. The file is written by the job's supervisor
(`heron.always_on.jobs.supervisor.OUTPUT_FILE` in the job directory)."""

from __future__ import annotations

import codecs
import contextlib
from dataclasses import dataclass

from heron.always_on.jobs.store import JobRecord


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputChunk:
    """Part of a job's output: `text` is bytes `start`..`end` (decoded) of `size` in all."""

    text: str
    start: int
    end: int
    size: int


def read_output(job: JobRecord, offset: int | None, limit: int) -> OutputChunk:
    """Up to `limit` bytes of output from byte `offset` (default: the newest `limit` bytes),
    never cutting a UTF-8 character: `end` is where the next read continues."""
    path = job.output_path
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as handle:
        size = handle.seek(0, 2)
        start = max(0, size - limit) if offset is None else min(max(offset, 0), size)
        handle.seek(start)
        raw = handle.read(limit)
        if offset is None:  # a tail may start inside a character
            skip = 0
            while skip < min(3, len(raw)) and raw[skip] & 0xC0 == 0x80:
                skip += 1
            raw, start = raw[skip:], start + skip
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(raw, final=job.finished and start + len(raw) >= size)
        end = start + len(raw) - len(decoder.getstate()[0])
        return OutputChunk(text=text, start=start, end=end, size=size)
    return OutputChunk(text="", start=0, end=0, size=0)


def tail_lines(job: JobRecord, lines: int) -> list[str]:
    """The last `lines` lines of a job's output."""
    if lines <= 0:
        return []
    return read_output(job, None, 16 * 1024).text.splitlines()[-lines:]


def output_size(job: JobRecord) -> int:
    try:
        return job.output_path.stat().st_size
    except FileNotFoundError:
        return 0
