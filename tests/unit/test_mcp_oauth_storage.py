"""The pieces of MCP OAuth that need no server: the token file, the consent step's checks,
the configuration, and secret scrubbing."""

from __future__ import annotations

import io
import json
import secrets
import stat
from pathlib import Path

import httpx2
import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

from heron.mcp.auth import (
    ConsentError,
    ConsentRefused,
    ConsentRequest,
    FileTokenStorage,
    LoopbackConsent,
    McpAuth,
    TerminalConsent,
    TokenCipher,
    TokenStoreLocked,
    parse_redirect,
    scrub_secrets,
    token_path,
)
from heron.mcp.auth.scrub import remember_secret
from heron.mcp.config import McpServerConfig

URL = "https://tickets.example.com/mcp"


def _storage(
    tmp_path: Path, *, now: list[float], key: str | None = None, **kw: object
) -> FileTokenStorage:
    fields: dict[str, object] = {"server": "tickets", "url": URL, **kw}
    return FileTokenStorage(
        token_path(tmp_path, str(fields["server"])),
        server=str(fields["server"]),
        url=str(fields["url"]),
        cipher=TokenCipher(key) if key else None,
        clock=lambda: now[0],
    )


def _token(**fields: object) -> OAuthToken:
    return OAuthToken.model_validate(
        {"access_token": "at-" + "a" * 20, "refresh_token": "rt-" + "r" * 20, **fields}
    )


async def test_tokens_round_trip_with_the_lifetime_that_is_left(tmp_path: Path) -> None:
    now = [1_000_000.0]
    storage = _storage(tmp_path, now=now)
    await storage.set_tokens(_token(expires_in=3600, scope="tickets:read"))
    now[0] += 600
    loaded = await storage.get_tokens()
    now[0] += 7200
    expired = await storage.get_tokens()

    assert loaded is not None and loaded.expires_in == 3000 and loaded.scope == "tickets:read"
    assert expired is not None and expired.expires_in == 0
    path = token_path(tmp_path, "tickets")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["tickets.json"]  # no temporary left


async def test_a_record_for_another_url_is_never_handed_out(tmp_path: Path) -> None:
    now = [0.0]
    await _storage(tmp_path, now=now).set_tokens(_token())
    moved = _storage(tmp_path, now=now, url="https://elsewhere.example.com/mcp")

    assert await moved.get_tokens() is None and await moved.get_client_info() is None


async def test_client_registrations_are_stored_next_to_the_tokens(tmp_path: Path) -> None:
    now = [0.0]
    storage = _storage(tmp_path, now=now)
    info = OAuthClientInformationFull(client_id="c-1", client_secret="s" * 24)
    await storage.set_client_info(info)
    await storage.set_tokens(_token())
    storage.clear_tokens()

    assert await storage.get_tokens() is None
    assert await storage.get_client_info() == info


async def test_an_encrypted_record_opens_only_with_its_key_and_for_its_server(
    tmp_path: Path,
) -> None:
    now = [0.0]
    key = secrets.token_urlsafe(32)
    await _storage(tmp_path, now=now, key=key).set_tokens(_token())
    raw = token_path(tmp_path, "tickets").read_text()
    other = tmp_path / "mcp-oauth" / "wiki.json"
    other.write_text(raw.replace('"server": "tickets"', '"server": "wiki"'))

    assert "at-aaaa" not in raw and json.loads(raw)["encrypted"] is True
    assert (await _storage(tmp_path, now=now, key=key).get_tokens()) == _token()
    with pytest.raises(TokenStoreLocked, match="no token key is set"):
        await _storage(tmp_path, now=now).get_tokens()
    with pytest.raises(TokenStoreLocked, match="does not open"):
        await _storage(tmp_path, now=now, key="k" * 40).get_tokens()
    with pytest.raises(TokenStoreLocked, match="does not open"):  # copied to another server
        await _storage(tmp_path, now=now, key=key, server="wiki").get_tokens()


async def test_a_plain_record_is_encrypted_on_its_next_write_once_a_key_is_set(
    tmp_path: Path,
) -> None:
    now = [0.0]
    await _storage(tmp_path, now=now).set_tokens(_token())
    keyed = _storage(tmp_path, now=now, key=secrets.token_urlsafe(32))
    await keyed.set_client_info(OAuthClientInformationFull(client_id="c-1"))

    raw = token_path(tmp_path, "tickets").read_text()
    assert json.loads(raw)["encrypted"] is True and "at-aaaa" not in raw
    assert await keyed.get_tokens() == _token()


def test_a_short_token_key_is_refused_and_reported_for_oauth_servers_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 32 characters"):
        TokenCipher("short")
    servers = {
        "tickets": McpServerConfig(url=URL, auth="oauth"),
        "plain": McpServerConfig(url=URL),
    }
    auth = McpAuth(servers, state_dir=tmp_path, token_key="short")

    assert auth.servers() == ["tickets"]
    assert auth.login_state("plain").status == "not_oauth"
    state = auth.login_state("tickets")
    assert state.status == "locked" and "at least 32 characters" in state.detail


def test_login_state_reads_the_file_without_showing_a_secret(tmp_path: Path) -> None:
    now = [1_000_000.0]
    storage = _storage(tmp_path, now=now)
    servers = {"tickets": McpServerConfig(url=URL, auth="oauth")}
    auth = McpAuth(servers, state_dir=tmp_path, clock=lambda: now[0], token_key="")
    assert auth.login_state("tickets").status == "logged_out"

    import asyncio

    asyncio.run(storage.set_tokens(_token(expires_in=3600, scope="tickets:read")))
    state = auth.login_state("tickets")
    now[0] += 4000
    later = auth.login_state("tickets")

    assert state.status == "logged_in" and state.detail == (
        "logged in (tickets:read), access token expires in 60 min"
    )
    assert later.status == "refreshable" and not later.needs_consent
    assert "at-" not in repr(state) and "rt-" not in repr(later)


# -- the consent step -----------------------------------------------------------------------------


def _request(state: str = "s-123") -> ConsentRequest:
    return ConsentRequest(
        request_id="login-1",
        server="tickets",
        url=f"https://auth.example.com/authorize?state={state}&scope=tickets%3Aread",
        state=state,
        redirect_uri="http://127.0.0.1:33418/callback",
        scope="tickets:read",
    )


def test_a_redirect_is_accepted_only_with_its_own_state() -> None:
    request = _request()
    ok = parse_redirect("http://127.0.0.1:33418/callback?code=c0de&state=s-123", request)
    pasted = parse_redirect("?code=c0de&state=s-123&iss=https%3A%2F%2Fauth", request)

    assert (ok.code, ok.state) == ("c0de", "s-123") and pasted.iss == "https://auth"
    with pytest.raises(ConsentError, match="does not belong to login request login-1"):
        parse_redirect("http://127.0.0.1:33418/callback?code=c0de&state=other", request)
    with pytest.raises(ConsentRefused) as refused:
        parse_redirect("?error=access_denied&error_description=no&state=s-123", request)
    assert refused.value.error == "access_denied" and refused.value.description == "no"
    with pytest.raises(ConsentError, match="no authorization code"):
        parse_redirect("?state=s-123", request)


def test_a_consent_request_is_read_from_the_sdk_s_authorization_url() -> None:
    request = ConsentRequest.for_url(
        "tickets",
        "https://auth.example.com/authorize?state=abc&scope=a+b&client_id=x",
        redirect_uri="http://127.0.0.1:1/cb",
    )
    assert (request.state, request.scope, request.server) == ("abc", "a b", "tickets")
    assert request.request_id.startswith("login-")


async def test_the_terminal_channel_prints_the_url_and_takes_the_pasted_address() -> None:
    out = io.StringIO()
    lines = ["http://127.0.0.1:33418/callback?code=c&state=s-123\n", "\n"]

    async def read_line() -> str:
        return lines.pop(0)

    channel = TerminalConsent(out=out, read_line=read_line)
    await channel.present(_request())

    assert "https://auth.example.com/authorize?state=s-123" in out.getvalue()
    assert "needs your consent (tickets:read)" in out.getvalue()
    assert parse_redirect(await channel.redirected(_request()), _request()).code == "c"
    with pytest.raises(ConsentError, match="no redirected address"):
        await channel.redirected(_request())


async def test_the_loopback_listener_completes_only_the_login_whose_state_it_carries() -> None:
    async with LoopbackConsent() as channel:
        uri = channel.redirect_uri("tickets")
        assert uri is not None
        request = ConsentRequest.for_url(
            "tickets", "https://auth.example.com/authorize?state=mine", redirect_uri=uri
        )
        await channel.present(request)
        async with httpx2.AsyncClient() as http:
            stranger = await http.get(f"{uri}?code=x&state=someone-else")
            wrong_path = await http.get(uri.replace("/callback", "/other"))
            mine = await http.get(f"{uri}?code=c0de&state=mine")
        address = await channel.redirected(request)

    assert (stranger.status_code, wrong_path.status_code, mine.status_code) == (400, 404, 200)
    assert parse_redirect(address, request).code == "c0de"


# -- configuration ---------------------------------------------------------------------------------


def test_oauth_configuration_mistakes_are_named() -> None:
    def problem(**fields: object) -> str:
        with pytest.raises(ValidationError) as exc:
            McpServerConfig.model_validate(fields)
        return str(exc.value)

    assert "Streamable HTTP (`url`) servers only" in problem(command="x", auth="oauth")
    assert 'need `auth = "oauth"`' in problem(url=URL, oauth={"scopes": ["a"]})
    assert "pre-registered `client_id`" in problem(
        url=URL, auth="oauth", oauth={"grant": "client_credentials", "client_secret_env": "S"}
    )
    assert "exactly one of" in problem(
        url=URL, auth="oauth", oauth={"grant": "client_credentials", "client_id": "c"}
    )
    assert "https:// URL" in problem(
        url=URL, auth="oauth", oauth={"client_metadata_url": "http://x.example/c.json"}
    )


def test_a_missing_client_secret_is_a_credential_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TICKETS_SECRET", raising=False)
    cfg = McpServerConfig.model_validate(
        {
            "url": URL,
            "auth": "oauth",
            "oauth": {"client_id": "heron", "client_secret_env": "TICKETS_SECRET"},
        }
    )
    assert cfg.credential_problems() == [
        "oauth: environment variable TICKETS_SECRET (the client secret) is not set"
    ]
    monkeypatch.setenv("TICKETS_SECRET", "s3cret-value")
    assert cfg.credential_problems() == [] and cfg.oauth.client_secret() == "s3cret-value"


def test_remembered_secrets_are_masked_everywhere_they_appear() -> None:
    token = "opaque-" + secrets.token_hex(12)
    remember_secret(token, None, "short")
    text = scrub_secrets(f"server said: token {token} is bad; short stays")

    assert token not in text and "opaq*[REDACTED]" in text and "short stays" in text
    assert scrub_secrets(text) == text
