"""`heron approvals`: list, show and answer requests to a human from any terminal.

Requests live in the state directory (`heron.humans`), or on the shared store `--store` names
(`[store] url`: every worker of `heron serve --store`), so this command answers a request that
a `heron serve` or another `heron run` opened — in another process, on another worker, even
after that process restarted. The answer is the console channel's: `--as NAME` (default: your
login name) is checked against the approvers the request was opened with; with nothing
configured that is whoever can run this command on the state directory.

Exit status: 0 done; 1 unknown request (or, for `verify`, a signature that does not verify);
2 a usage mistake or an answer that does not fit the request; 3 the request had already ended
(the message names who answered and when); 4 not an approver of the request.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from heron.cli import common
from heron.cli.common import EXIT_ERROR, EXIT_OK, UsageError
from heron.cli.flag_values import row_limit

if TYPE_CHECKING:
    from heron.humans.desk import RequestDesk
    from heron.humans.postgres_store import PostgresRequestStore
    from heron.humans.store import AlwaysRule, HumanRequest

EXIT_ALREADY_ANSWERED = 3
EXIT_NOT_AN_APPROVER = 4
_STATUS_CHOICES = (
    "pending",
    "all",
    "queued",
    "working",
    "input_required",
    "auth_required",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
    "lost",
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `approvals` to the `heron` parser."""
    approvals = sub.add_parser(
        "approvals",
        help="list and answer requests to a human (approvals, questions) from any terminal",
        description="Requests to a human wait in the state directory (or the shared store "
        "--store names); answer them from any terminal. Exit status: 0 done, 1 unknown "
        "request or invalid signature, 2 usage or an answer that does not fit, 3 already "
        "answered, 4 not an approver.",
    )
    asub = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")

    ls = asub.add_parser("list", help="requests, pending ones by default")
    ls.add_argument(
        "--status",
        choices=_STATUS_CHOICES,
        default="pending",
        help="pending (every active status, the default), all, or one status",
    )
    ls.add_argument("--session", help="only requests of this session")
    ls.add_argument("--limit", type=row_limit, default=100, metavar="N", help="the latest N")
    ls.add_argument("--json", action="store_true", help="one JSON array")
    ls.add_argument(
        "-q", "--quiet", action="store_true", help="only the ids, one per line (oldest first)"
    )

    show = asub.add_parser("show", help="one request in full")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="as JSON")
    show.add_argument(
        "--exact", action="store_true", help="show the exact arguments, not the redacted copy"
    )

    approve = asub.add_parser("approve", help="let the call run")
    approve.add_argument("id")
    approve.add_argument(
        "--always",
        action="store_true",
        help="also approve calls like it without asking, until the rule expires",
    )
    approve.add_argument(
        "--scope",
        choices=("session", "tool", "command"),
        default="session",
        help="with --always: this tool in this session (default), this tool everywhere, or "
        "the commands beginning with --prefix",
    )
    approve.add_argument("--prefix", metavar="WORDS", help="with --scope command, e.g. 'git push'")
    approve.add_argument(
        "--for",
        dest="ttl",
        metavar="SPAN",
        help="with --always: how long the rule lasts (90s, 15m, 2h, 3d, 1w; default "
        "[approvals] rule_ttl_s)",
    )
    deny = asub.add_parser("deny", help="refuse the call; the model is told it was denied")
    deny.add_argument("id")
    replace = asub.add_parser("replace", help="do not run the call; TEXT becomes its result")
    replace.add_argument("id")
    replace.add_argument("text")
    edit = asub.add_parser("edit", help="run the call with changed arguments")
    edit.add_argument("id")
    edit.add_argument("--args", required=True, metavar="JSON", help="the arguments to run with")
    answer = asub.add_parser("answer", help="answer a question")
    answer.add_argument("id")
    answer.add_argument("value")
    answer.add_argument("--json", action="store_true", help="VALUE is JSON, not text")
    for parser in (approve, deny, replace, edit, answer):
        parser.add_argument("--reason", help="why (kept with the decision and exported)")
        parser.add_argument(
            "--as", dest="as_name", metavar="NAME", help="who you are (default: login name)"
        )

    rules = asub.add_parser("rules", help="the stored 'always' rules")
    rules.add_argument("--revoke", metavar="RULE_ID", help="revoke one rule")
    rules.add_argument("--all", action="store_true", help="expired and revoked ones too")
    rules.add_argument("--json", action="store_true", help="one JSON array")

    verify = asub.add_parser("verify", help="check the signature of a request's decision")
    verify.add_argument("id")

    export = asub.add_parser("export", help="ended requests as JSON Lines (feedback data)")
    export.add_argument("--since", metavar="WHEN", help="created since WHEN (15m, 2h, 2024-05-01)")
    export.add_argument(
        "--exact", action="store_true", help="exact arguments instead of the redacted copy"
    )

    for parser in (ls, show, approve, deny, replace, edit, answer, rules, verify, export):
        common.add_config_flags(parser)
        common.add_store_flag(parser)
    approvals.set_defaults(handler=cmd_approvals)


def cmd_approvals(args: argparse.Namespace) -> int:
    from heron.humans.refusals import AlreadyAnswered, InvalidAnswer, NotAnApprover, UnknownRequest

    with _desk(args) as desk:
        try:
            return _COMMANDS[args.approvals_command](desk, args)
        except UnknownRequest as exc:
            common.err(str(exc))
            return EXIT_ERROR
        except InvalidAnswer as exc:
            raise UsageError(str(exc)) from exc
        except AlreadyAnswered as exc:
            common.err(str(exc))
            return EXIT_ALREADY_ANSWERED
        except NotAnApprover as exc:
            common.err(str(exc))
            return EXIT_NOT_AN_APPROVER


@contextmanager
def _desk(args: argparse.Namespace) -> Iterator[RequestDesk]:
    from heron.humans.desk import RequestDesk
    from heron.humans.signing import DecisionSigner
    from heron.humans.sqlite_store import SqliteRequestStore
    from heron.turn.signing_keys import key_store

    with common.library_errors():
        config = common.load_config(args)
    state_dir = common.state_dir(args)
    pool = common.shared_pool(args)
    store: SqliteRequestStore | PostgresRequestStore
    if pool is None:
        store = SqliteRequestStore.open_dir(state_dir)
    else:
        from heron.humans.postgres_store import PostgresRequestStore

        store = PostgresRequestStore(pool)
    try:
        yield RequestDesk(
            store,
            signer=DecisionSigner(
                key_store("decision", state_dir=state_dir, store_url=config.store.url)
            ),
            config=config.approvals,
            approval_timeout_s=config.approval.timeout_s,
        )
    finally:
        store.close()


# -- listing ------------------------------------------------------------------------------


def _list(desk: RequestDesk, args: argparse.Namespace) -> int:
    from heron._support.vocabulary import ACTIVE_STATUSES

    desk.expire()
    statuses: Any = (
        ACTIVE_STATUSES
        if args.status == "pending"
        else None
        if args.status == "all"
        else {args.status}
    )
    found = desk.store.list(statuses=statuses, session=args.session, limit=args.limit)
    if args.json:
        common.out(json.dumps([r.to_data() for r in found], ensure_ascii=False, indent=2))
        return EXIT_OK
    if args.quiet:
        for r in found:
            common.out(r.id)
        return EXIT_OK
    if not found:
        common.out("no pending requests" if args.status == "pending" else "no requests")
        return EXIT_OK
    for r in found:
        common.out(f"{r.id}  {r.status:<14} {r.session:<12} {_what(r)}")
        common.out(f"    {_ending(r)}")
    return EXIT_OK


def _show(desk: RequestDesk, args: argparse.Namespace) -> int:
    r = desk.get(args.id)
    if args.json:
        common.out(json.dumps(r.to_data(exact=args.exact), ensure_ascii=False, indent=2))
        return EXIT_OK
    shown = r.arguments if args.exact else r.display_arguments
    lines = [
        f"{r.id} ({r.kind}, {r.urgency})",
        f"  status:    {r.status}" + (f", {r.outcome}" if r.outcome else ""),
        f"  session:   {r.session}   calls: {', '.join(r.call_ids)}",
        f"  tool:      {r.tool}" + (f"   risk: {r.risk}" if r.risk else ""),
        f"  question:  {r.question}",
        "  arguments" + ("" if args.exact else " (redacted)") + ":",
        *("    " + line for line in json.dumps(shown, indent=2, ensure_ascii=False).splitlines()),
    ]
    if r.options:
        lines.append(f"  options:   {', '.join(r.options)}")
    lines.append(f"  approvers: {_approvers(r)}")
    lines.append(f"  {_ending(r)}")
    if r.decision is not None:
        lines.append(f"  decision:  {json.dumps(r.decision.to_data(), ensure_ascii=False)}")
    if r.kind == "question" and r.outcome in ("answered", "defaulted"):
        lines.append(f"  answer:    {json.dumps(r.answer, ensure_ascii=False)}")
    if r.reason:
        lines.append(f"  reason:    {r.reason}")
    if r.signature:
        lines.append(f"  signature: {r.signature}")
    if r.deliveries:
        delivered = ", ".join(f"{k}: {v}" for k, v in r.deliveries.items())
        lines.append(f"  delivered: {delivered}")
    for line in lines:
        common.out(line)
    return EXIT_OK


def _what(r: HumanRequest) -> str:
    from heron.safety.redact import summarize_args

    if r.kind == "question":
        return f"question: {r.question[:100]}"
    return f"{r.tool}({summarize_args(r.display_arguments)})"


def _ending(r: HumanRequest) -> str:
    if r.active:
        left = "" if r.deadline is None else f"until {common.when(r.deadline)}"
        return f"waits for {_approvers(r)} {left}".rstrip()
    at = "" if r.answered_at is None else f" at {common.when(r.answered_at)}"
    return f"ended{at} by {r.answered_by}: {r.outcome}" + (f" ({r.reason})" if r.reason else "")


def _approvers(r: HumanRequest) -> str:
    from heron.humans.approvers import describe

    return describe(r.approvers)


# -- answering ----------------------------------------------------------------------------


def _name(args: argparse.Namespace) -> str:
    import getpass

    if args.as_name is not None:
        name = str(args.as_name)
        if not name.strip() or name != name.strip() or ":" in name:
            raise UsageError(f"--as must be a plain name: {name!r}")
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError) as exc:
        raise UsageError("cannot tell who you are: pass --as NAME") from exc


def _decided(r: HumanRequest) -> int:
    common.out(f"{r.id}: {r.outcome} by {r.answered_by} at {common.when(r.answered_at or 0)}")
    return EXIT_OK


def _approve(desk: RequestDesk, args: argparse.Namespace) -> int:
    from heron._support.vocabulary import HumanDecision
    from heron.humans.desk import RuleChoice

    if not args.always and (args.ttl or args.prefix or args.scope != "session"):
        raise UsageError("--scope, --prefix and --for go with --always")
    decision = HumanDecision.always() if args.always else HumanDecision.yes()
    rule = None
    if args.always:
        rule = RuleChoice(
            scope=args.scope,
            prefix=args.prefix,
            ttl_s=None if args.ttl is None else _span(args.ttl),
        )
    r = desk.decide(
        args.id, decision, channel="console", name=_name(args), reason=args.reason, rule=rule
    )
    code = _decided(r)
    if args.always:
        made = next((x for x in reversed(desk.store.rules()) if x.request_id == r.id), None)
        if made is not None:
            common.out(f"rule {made.id}: {_rule_text(made)}")
    return code


def _deny(desk: RequestDesk, args: argparse.Namespace) -> int:
    from heron._support.vocabulary import HumanDecision

    return _decided(
        desk.decide(
            args.id, HumanDecision.no(), channel="console", name=_name(args), reason=args.reason
        )
    )


def _replace(desk: RequestDesk, args: argparse.Namespace) -> int:
    from heron._support.vocabulary import HumanDecision

    decision = HumanDecision.replace(args.text)
    return _decided(
        desk.decide(args.id, decision, channel="console", name=_name(args), reason=args.reason)
    )


def _edit(desk: RequestDesk, args: argparse.Namespace) -> int:
    from heron._support.vocabulary import HumanDecision

    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise UsageError("--args must be a JSON object")
    decision = HumanDecision.edit(arguments)
    return _decided(
        desk.decide(args.id, decision, channel="console", name=_name(args), reason=args.reason)
    )


def _answer(desk: RequestDesk, args: argparse.Namespace) -> int:
    value: Any = args.value
    if args.json:
        try:
            value = json.loads(args.value)
        except json.JSONDecodeError as exc:
            raise UsageError(f"VALUE is not JSON: {exc}") from exc
    return _decided(
        desk.answer(args.id, value, channel="console", name=_name(args), reason=args.reason)
    )


def _span(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise UsageError(f"--for takes a span such as 90s, 15m, 2h, 3d or 1w, not {text!r}")
    return (
        float(match.group(1))
        * {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}[match.group(2)]
    )


# -- rules, verify, export ----------------------------------------------------------------


def _rule_text(rule: AlwaysRule) -> str:
    where = "every session" if rule.session is None else f"session {rule.session}"
    what = (
        f"{rule.tool} commands beginning with `{' '.join(rule.command_prefix)}`"
        if rule.command_prefix
        else rule.tool
    )
    return f"{what}, in {where}, until {common.when(rule.expires_at)}"


def _rules(desk: RequestDesk, args: argparse.Namespace) -> int:
    if args.revoke is not None:
        if not desk.revoke_rule(args.revoke):
            common.err(f"no live rule {args.revoke!r}")
            return EXIT_ERROR
        common.out(f"revoked {args.revoke}")
        return EXIT_OK
    now = desk.clock.time()
    found = desk.store.rules(now=None if args.all else now)
    if args.json:
        data = [
            {
                "id": r.id,
                "tool": r.tool,
                "scope": r.scope,
                "session": r.session,
                "command_prefix": None if r.command_prefix is None else list(r.command_prefix),
                "created_at": r.created_at,
                "expires_at": r.expires_at,
                "created_by": r.created_by,
                "request_id": r.request_id,
                "revoked_at": r.revoked_at,
                "live": r.live(now),
            }
            for r in found
        ]
        common.out(json.dumps(data, ensure_ascii=False, indent=2))
        return EXIT_OK
    if not found:
        common.out("no 'always' rules")
    for r in found:
        state = "" if r.live(now) else (" [revoked]" if r.revoked_at else " [expired]")
        common.out(f"{r.id}  {_rule_text(r)} (by {r.created_by}){state}")
    return EXIT_OK


def _verify(desk: RequestDesk, args: argparse.Namespace) -> int:
    from heron.humans.signing import verify_decision
    from heron.turn.signing_keys import key_store

    r = desk.get(args.id)
    # Any worker of a shared store may have signed it: its keys are the store's.
    keys = key_store("decision", state_dir=common.state_dir(args), store_url=common.store_url(args))
    result = verify_decision(r, keys)
    if result.valid:
        common.out(
            f"valid: {r.id} {r.outcome} by {r.answered_by} at "
            f"{common.when(r.answered_at or 0)} ({result.detail})"
        )
        return EXIT_OK
    common.out(f"invalid: {result.detail}")
    return EXIT_ERROR


def _export(desk: RequestDesk, args: argparse.Namespace) -> int:
    since = None
    if args.since is not None:
        try:
            since = common.parse_since(args.since)
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from exc
    for record in desk.export(since=since, exact=args.exact):
        common.out(json.dumps(record, ensure_ascii=False))
    return EXIT_OK


_COMMANDS = {
    "list": _list,
    "show": _show,
    "approve": _approve,
    "deny": _deny,
    "replace": _replace,
    "edit": _edit,
    "answer": _answer,
    "rules": _rules,
    "verify": _verify,
    "export": _export,
}
