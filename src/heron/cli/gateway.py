"""`heron gateway hash-token`: the `sha256` line of a `[[gateway.tokens]]` entry.

The token is read from standard input (so it never sits in the shell's history or in `ps`),
or made up when `--new` is given: then the token is printed once, with its hash.
"""

from __future__ import annotations

import argparse
import secrets
import sys

from heron.cli import common
from heron.cli.common import EXIT_OK, UsageError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `gateway` to the `heron` parser."""
    gateway = sub.add_parser(
        "gateway", help="the HTTP API and web console of heron serve: hash a token"
    )
    gsub = gateway.add_subparsers(dest="gateway_command", required=True, metavar="ACTION")
    hashing = gsub.add_parser("hash-token", help="the sha256 of a token, for [[gateway.tokens]]")
    hashing.add_argument("--new", action="store_true", help="make up a new token and print it")
    gateway.set_defaults(handler=cmd_gateway)


def cmd_gateway(args: argparse.Namespace) -> int:
    from heron.gateway.auth import hash_token

    if args.new:
        token = secrets.token_urlsafe(32)
        common.out(f"token = {token}")
    else:
        token = sys.stdin.readline().strip()
        if not token:
            raise UsageError("give the token on standard input (or --new)")
    common.out(f'sha256 = "{hash_token(token)}"')
    return EXIT_OK
