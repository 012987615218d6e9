"""Which names a session may have: checked where a name arrives from outside (a webhook's path,
`heron sessions`), kept apart from the session modules so that check imports nothing else."""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}")


def check_session_name(name: str) -> str:
    """`name` if it can name a new session (letters, digits, `._:@/-`, at most 128 characters,
    starting with a letter or digit); else `ValueError`."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid session name {name!r}: use letters, digits and . _ : @ / - "
            "(at most 128 characters, starting with a letter or digit)"
        )
    return name
