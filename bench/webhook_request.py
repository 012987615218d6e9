"""A signed `POST /webhook…` request as raw HTTP bytes, for the serving benches."""

from __future__ import annotations

import hashlib
import hmac
import json
import time


def signed_webhook(port: int, path: str, event_id: str, secret: str) -> bytes:
    """One `{"id", "text"}` event for `path`, signed with `secret` the way `heron serve` checks."""
    body = json.dumps({"id": event_id, "text": "ping"}).encode()
    ts = str(int(time.time()))
    mac = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"X-Heron-Timestamp: {ts}\r\nX-Heron-Signature: sha256={mac}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
