"""`heron receipts verify`: check a receipt against a tool, its arguments and its output."""

from __future__ import annotations

import argparse
from pathlib import Path

from heron._support.limits import InputRejected, parse_json
from heron.cli import common
from heron.cli.common import EXIT_ERROR, EXIT_OK, UsageError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `receipts` to the `heron` parser."""
    receipts = sub.add_parser("receipts", help="verify tool receipts")
    rsub = receipts.add_subparsers(dest="receipts_command", required=True, metavar="ACTION")
    rv = rsub.add_parser("verify", help="check a receipt against a tool, its arguments and output")
    rv.add_argument("receipt")
    rv.add_argument("--tool", required=True)
    rv.add_argument("--args", required=True, help="the executed arguments as JSON")
    output = rv.add_mutually_exclusive_group(required=True)
    output.add_argument("--output", help="the raw tool output")
    output.add_argument("--output-file", type=Path, help="file holding the raw tool output")
    common.add_config_flags(rv)
    common.add_store_flag(rv)
    receipts.set_defaults(handler=cmd_receipts)


def cmd_receipts(args: argparse.Namespace) -> int:
    from heron.turn.receipts import parse_receipt, verify_receipt
    from heron.turn.signing_keys import key_store

    state_dir = common.state_dir(args)
    # Invocation mistakes first (exit 2), whatever the receipt's fate.
    try:
        arguments = parse_json(args.args)
    except InputRejected as exc:
        raise UsageError(f"--args is not JSON heron takes in: {exc.problem}") from exc
    if not isinstance(arguments, dict):
        raise UsageError("--args must be a JSON object")
    try:
        output = args.output if args.output is not None else args.output_file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --output-file {args.output_file}: {exc}") from exc
    parsed = parse_receipt(args.receipt)
    if parsed is None:
        common.out("invalid: not a well-formed heron receipt")
        return EXIT_ERROR
    url = common.store_url(args)
    key = key_store("receipt", state_dir=state_dir, store_url=url).load(parsed[0])
    if key is None:
        common.out(
            f"invalid: no receipt key {parsed[0]} in {'the shared store' if url else state_dir}"
        )
        return EXIT_ERROR
    if verify_receipt(args.receipt, key=key, tool=args.tool, arguments=arguments, output=output):
        common.out(f"valid: {args.tool} produced this output at epoch {parsed[1]}")
        return EXIT_OK
    common.out("invalid: the receipt does not match this tool, arguments and output")
    return EXIT_ERROR
