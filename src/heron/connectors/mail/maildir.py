"""A Maildir and the mail-triage tools over it: list, read, draft a reply, archive, flag.

`Maildir` is the on-disk format every MUA and MDA understands (`tmp/`, `new/`, `cur/`;
Maildir++ sub-folders `.Drafts`, `.Archive`, …). A message is one file, delivered by writing
into `tmp/` and renaming into `new/`, so a reader never sees half a message; its flags live in
the file name after `:2,` (`F` flagged, `S` seen, `R` replied, `D` draft), so setting one is a
rename, never a rewrite. The part before `:` is the message's id for the tools — unique across
folders and stable while the message moves.

The tools never send anything: `draft_reply` writes a draft into `.Drafts` for the user to
review. "High priority" is the standard `F` flag, which mail clients show as flagged/starred.
"""

from __future__ import annotations

import datetime as dt
import email.policy
import itertools
import os
import re
import socket
import time
from dataclasses import dataclass
from email.feedparser import BytesFeedParser
from email.message import EmailMessage
from email.utils import format_datetime, getaddresses, make_msgid
from pathlib import Path
from typing import Any, Literal

from heron.errors import HeronError
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = [
    "MailFormatError",
    "MailRef",
    "Maildir",
    "mail_summary",
    "maildir_tools",
    "message_text",
    "parse_message",
]

INBOX = "INBOX"
DRAFTS = "Drafts"
ARCHIVE = "Archive"
_FOLDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _-]{0,63}$")
_KEY = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
QUARANTINE = "quarantine"
"""The directory at the Maildir's root where mail that cannot be read is set aside: not a
Maildir++ folder (no leading dot), so no folder listing, tool or mail client reads it as mail."""
MAX_MIME_DEPTH = 100
"""How deep parts may nest inside one another (multipart in multipart, a forwarded message in
a part, …). Real mail nests a handful of levels; without a bound, the standard parser recurses
once per level and a mail a few thousand levels deep ends in `RecursionError`. 100 is far
beyond any mail client and far below the recursion limit (each level costs the parser and
`walk`/`get_body` a few frames)."""
_COUNTER = itertools.count()
MAX_BODY_CHARS = 20_000

Flag = Literal["high_priority", "seen", "answered"]
_FLAG_LETTERS: dict[str, str] = {"high_priority": "F", "seen": "S", "answered": "R"}
_LETTER_NAMES = {"F": "high_priority", "S": "seen", "R": "answered", "D": "draft"}


@dataclass(frozen=True, kw_only=True, slots=True)
class MailRef:
    """Where one message is stored."""

    key: str
    folder: str
    path: Path
    flags: str
    """Maildir flag letters, sorted."""

    @property
    def is_new(self) -> bool:
        """Still in `new/`: delivered but not yet taken in by a reader."""
        return self.path.parent.name == "new"


class Maildir:
    """A Maildir root (the INBOX) and its Maildir++ sub-folders."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._ensure(root)

    @staticmethod
    def _ensure(path: Path) -> None:
        for sub in ("tmp", "new", "cur"):
            (path / sub).mkdir(parents=True, exist_ok=True)

    def folder_path(self, folder: str) -> Path:
        """The directory of `folder` (created on first use); `ValueError` for a bad name."""
        if folder == INBOX:
            return self.root
        if not _FOLDER.match(folder):
            raise ValueError(f"invalid folder name {folder!r}")
        path = self.root / f".{folder}"
        self._ensure(path)
        return path

    def folders(self) -> list[str]:
        subs = sorted(p.name[1:] for p in self.root.glob(".*") if (p / "cur").is_dir())
        return [INBOX, *subs]

    def deliver(self, raw: bytes, *, folder: str = INBOX, flags: str = "") -> str:
        """Store a message (`tmp/` then an atomic rename); returns its key. With `flags` it goes
        straight to `cur/` (a draft we wrote is not news), else to `new/`."""
        base = self.folder_path(folder)
        key = f"{time.time_ns() // 1000}.P{os.getpid()}Q{next(_COUNTER)}.{_hostname()}"
        tmp = base / "tmp" / key
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        target = base / "cur" / f"{key}:2,{_sorted(flags)}" if flags else base / "new" / key
        os.rename(tmp, target)
        return key

    def new_messages(self, folder: str = INBOX) -> list[MailRef]:
        """Messages in `new/`, oldest delivery first."""
        base = self.folder_path(folder)
        return [_ref(p, folder) for p in sorted((base / "new").iterdir(), key=_delivery_order)]

    def take_in(self, ref: MailRef) -> MailRef:
        """Move a message from `new/` to `cur/` (it has been seen to exist, not read)."""
        target = ref.path.parent.parent / "cur" / f"{ref.key}:2,{ref.flags}"
        os.rename(ref.path, target)
        return _ref(target, ref.folder)

    def messages(self, folder: str = INBOX) -> list[MailRef]:
        base = self.folder_path(folder)
        paths = [*(base / "new").iterdir(), *(base / "cur").iterdir()]
        return [_ref(p, folder) for p in sorted(paths, key=_delivery_order)]

    def locate(self, key: str) -> MailRef | None:
        """Find a message by key in any folder."""
        if not _KEY.match(key):
            return None
        for folder in self.folders():
            base = self.folder_path(folder)
            for sub in ("cur", "new"):
                for path in (base / sub).glob(f"{key}*"):
                    if path.name.split(":", 1)[0] == key:
                        return _ref(path, folder)
        return None

    def read(self, ref: MailRef) -> EmailMessage:
        """The parsed message; `MailFormatError` for one that cannot be parsed."""
        return parse_message(ref.path.read_bytes())

    def quarantine(self, ref: MailRef) -> Path:
        """Set a message aside, out of its folder, into `QUARANTINE` at the root (its file
        name kept, nothing rewritten); returns where it is now."""
        place = self.root / QUARANTINE
        place.mkdir(exist_ok=True)
        target = place / ref.path.name
        os.rename(ref.path, target)
        return target

    def set_flags(self, ref: MailRef, flags: str) -> MailRef:
        """Replace the message's flags (a rename into `cur/`)."""
        target = ref.path.parent.parent / "cur" / f"{ref.key}:2,{_sorted(flags)}"
        os.rename(ref.path, target)
        return _ref(target, ref.folder)

    def move(self, ref: MailRef, folder: str) -> MailRef:
        """Move the message to `folder`, keeping its key and flags."""
        target = self.folder_path(folder) / "cur" / f"{ref.key}:2,{ref.flags}"
        os.rename(ref.path, target)
        return _ref(target, folder)


def _hostname() -> str:
    # Keys must stay plain (`_KEY`): Maildir's escapes for "/" and ":" are not.
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "localhost"


def _sorted(flags: str) -> str:
    return "".join(sorted(set(flags)))


def _delivery_order(path: Path) -> tuple[int, str]:
    head = path.name.split(".", 1)[0]
    return (int(head) if head.isdigit() else 0, path.name)


def _ref(path: Path, folder: str) -> MailRef:
    key, _, info = path.name.partition(":")
    flags = info[2:] if info.startswith("2,") else ""
    return MailRef(key=key, folder=folder, path=path, flags=flags)


# -- parsing --------------------------------------------------------------------------------


class MailFormatError(HeronError, ValueError):
    """A message that cannot be parsed (its parts nest deeper than `MAX_MIME_DEPTH`)."""


class _BoundedParser(BytesFeedParser):
    """The standard parser, refusing parts nested deeper than `MAX_MIME_DEPTH`.

    `_new_message` opens every part (and the message itself) and `_msgstack` holds the parts
    it is inside of: both are the parser's own, unchanged since Python 3.2, and not in the
    stubs."""

    def _new_message(self) -> None:
        if len(self._msgstack) > MAX_MIME_DEPTH:  # type: ignore[attr-defined]
            raise MailFormatError(f"its MIME parts nest more than {MAX_MIME_DEPTH} levels deep")
        super()._new_message()  # type: ignore[misc]


def parse_message(raw: bytes) -> EmailMessage:
    """`raw` parsed as a mail (`email.policy.default`); `MailFormatError` when its parts nest
    too deep. Broken headers or bodies are no error: they become the parser's defects."""
    parser = _BoundedParser(policy=email.policy.default)
    try:
        parser.feed(raw)
        message = parser.close()
    except RecursionError:  # not reachable within the bound; a clear error all the same
        raise MailFormatError("its structure nests too deep to parse") from None
    assert isinstance(message, EmailMessage)  # guaranteed by policy.default
    return message


# -- message content ------------------------------------------------------------------------


def message_text(message: EmailMessage, limit: int = MAX_BODY_CHARS) -> str:
    """The readable body: the plain-text part, else the HTML part with tags removed."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        text = str(part.get_content())
    except (LookupError, ValueError):  # an unknown charset or broken encoding
        payload = part.get_payload(decode=True)
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if part.get_content_subtype() == "html":
        text = re.sub(r"\s+\n", "\n", re.sub(r"<[^>]+>", " ", text))
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " […cut]"


def mail_summary(ref: MailRef, message: EmailMessage) -> dict[str, Any]:
    """Headers and flags of one message, as the tools and mail events show them."""
    senders = getaddresses([str(message.get("From", ""))])
    name, address = senders[0] if senders else ("", "")
    return {
        "id": ref.key,
        "folder": ref.folder,
        "from": address,
        "from_name": name,
        "to": [a for _, a in getaddresses([str(v) for v in message.get_all("To", [])])],
        "subject": str(message.get("Subject", "")),
        "date": str(message.get("Date", "")),
        "message_id": str(message.get("Message-ID", "")).strip() or None,
        "flags": [_LETTER_NAMES.get(letter, letter) for letter in ref.flags],
        "attachments": [
            {"filename": part.get_filename(), "content_type": part.get_content_type()}
            for part in message.iter_attachments()
        ],
    }


def _calendar_parts(message: EmailMessage) -> list[str]:
    texts: list[str] = []
    for part in message.walk():
        if part.get_content_type() == "text/calendar":
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                texts.append(payload.decode("utf-8", "replace")[:4000])
    return texts


def build_reply(original: EmailMessage, body: str, *, from_addr: str) -> EmailMessage:
    """A reply to `original`: addressed to its Reply-To (else From), threaded by headers."""
    reply = EmailMessage(policy=email.policy.SMTP)
    to = original.get("Reply-To") or original.get("From") or ""
    subject = str(original.get("Subject", ""))
    reply["From"] = from_addr
    reply["To"] = str(to)
    reply["Subject"] = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    reply["Date"] = format_datetime(dt.datetime.now(dt.UTC))
    reply["Message-ID"] = make_msgid(domain=from_addr.rpartition("@")[2] or "localhost")
    parent = str(original.get("Message-ID", "")).strip()
    if parent:
        reply["In-Reply-To"] = parent
        references = str(original.get("References", "")).split()
        reply["References"] = " ".join([*references, parent])
    reply.set_content(body)
    return reply


# -- tools ----------------------------------------------------------------------------------


def maildir_tools(box: Maildir, *, from_addr: str) -> list[Tool]:
    """The triage tools over `box`; drafts are written as `from_addr`."""

    def find(mail_id: str) -> MailRef | ToolResult:
        ref = box.locate(mail_id)
        if ref is None:
            return ToolResult.fail(f"no message with id {mail_id!r}; use list_mail to see ids")
        return ref

    @tool(read_only=True, idempotent=True, owner="builtin", examples=[{"folder": "INBOX"}])
    def list_mail(folder: str = INBOX, unread_only: bool = False, limit: int = 50) -> Any:
        """List the messages of a mail folder, oldest first: id, sender, subject, date, flags.

        Args:
            folder: `INBOX` (default), `Drafts`, `Archive` or another folder name.
            unread_only: Only messages without the `seen` flag.
            limit: At most this many (the newest ones).
        """
        if folder not in box.folders():
            return ToolResult.fail(f"no folder {folder!r}; folders: {box.folders()}")
        rows = [mail_summary(ref, box.read(ref)) for ref in box.messages(folder)]
        if unread_only:
            rows = [r for r in rows if "seen" not in r["flags"]]
        return {"folder": folder, "count": len(rows), "messages": rows[-max(limit, 1) :]}

    @tool(read_only=True, idempotent=True, owner="builtin")
    def read_mail(id: str) -> Any:
        """Read one message in full: headers, body text, attachment names, and the text of any
        calendar invitation (text/calendar) it carries. Reading does not mark it seen.

        Args:
            id: The message id from list_mail or a mail event.
        """
        ref = find(id)
        if isinstance(ref, ToolResult):
            return ref
        message = box.read(ref)
        result = mail_summary(ref, message)
        result["body"] = message_text(message)
        calendar = _calendar_parts(message)
        if calendar:
            result["calendar"] = calendar
        return result

    @tool(owner="builtin", examples=[{"id": "1700000000.P1Q0.host", "body": "Thanks, see you."}])
    def draft_reply(id: str, body: str) -> Any:
        """Write a reply to a message as a DRAFT in the Drafts folder. Nothing is sent: the
        user reviews and sends drafts. The draft is addressed to the sender and threaded.

        Args:
            id: The message being answered.
            body: The reply text.
        """
        ref = find(id)
        if isinstance(ref, ToolResult):
            return ref
        if not body.strip():
            return ToolResult.fail("the reply body is empty")
        reply = build_reply(box.read(ref), body, from_addr=from_addr)
        key = box.deliver(reply.as_bytes(), folder=DRAFTS, flags="DS")
        return {"draft_id": key, "folder": DRAFTS, "to": reply["To"], "subject": reply["Subject"]}

    @tool(idempotent=True, owner="builtin")
    def archive_mail(id: str) -> Any:
        """Move a message out of the inbox into the Archive folder (it is kept, not deleted).

        Args:
            id: The message to archive.
        """
        ref = find(id)
        if isinstance(ref, ToolResult):
            return ref
        if ref.folder == ARCHIVE:
            return {"id": id, "folder": ARCHIVE, "note": "already archived"}
        moved = box.move(ref, ARCHIVE)
        return {"id": id, "folder": moved.folder, "from_folder": ref.folder}

    @tool(idempotent=True, owner="builtin", examples=[{"id": "1700.P1Q0.h", "flag": "seen"}])
    def flag_mail(id: str, flag: Flag, remove: bool = False) -> Any:
        """Set (or with `remove`, clear) a flag on a message. `high_priority` marks it
        flagged/starred in every mail client; `answered` records that it was replied to.

        Args:
            id: The message.
            flag: `high_priority`, `seen` or `answered`.
            remove: Clear the flag instead of setting it.
        """
        ref = find(id)
        if isinstance(ref, ToolResult):
            return ref
        letter = _FLAG_LETTERS[flag]
        flags = ref.flags.replace(letter, "") if remove else ref.flags + letter
        updated = box.set_flags(ref, flags)
        return {"id": id, "flags": [_LETTER_NAMES.get(f, f) for f in updated.flags]}

    return [list_mail, read_mail, draft_reply, archive_mail, flag_mail]
