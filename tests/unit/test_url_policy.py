"""UrlPolicy: schemes, resolved addresses, the allow-list and the metadata services."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from heron.safety.url_policy import UrlPolicy, UrlRefused


async def refusal(policy: UrlPolicy, url: str) -> str:
    with pytest.raises(UrlRefused) as caught:
        await policy.resolve(url)
    return str(caught.value)


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "example.com/a"]
)
async def test_only_http_and_https_schemes_are_accepted(url: str) -> None:
    assert "only http:// and https://" in await refusal(UrlPolicy(), url)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://[::1]:8080/", "loopback"),
        ("http://10.0.0.7/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.10.10/", "link-local"),
        ("http://[fd00::1]/", "private"),
        ("http://100.64.0.1/", "shared"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://0.0.0.0/", "unicast"),
    ],
)
async def test_non_public_addresses_are_refused_by_default(url: str, reason: str) -> None:
    assert reason in await refusal(UrlPolicy(), url)


async def test_a_public_address_resolves_to_itself_without_dns() -> None:
    resolved = await UrlPolicy().resolve("https://93.184.215.14/path?q=1")
    assert (resolved.scheme, resolved.address, resolved.port) == ("https", "93.184.215.14", 443)


async def test_host_names_are_judged_by_the_addresses_they_resolve_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = {"innocent.example": "10.1.2.3", "public.example": "93.184.215.14"}

    def fake_getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    assert "10.1.2.3 is a private address" in await refusal(UrlPolicy(), "http://innocent.example/")
    resolved = await UrlPolicy().resolve("http://public.example:8080/")
    assert (resolved.host, resolved.address, resolved.port) == (
        "public.example",
        "93.184.215.14",
        8080,
    )


async def test_an_unresolvable_host_is_refused_with_the_resolver_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing_getaddrinfo(*args: Any, **kwargs: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", failing_getaddrinfo)
    assert "cannot resolve host 'nowhere.invalid'" in await refusal(
        UrlPolicy(), "http://nowhere.invalid/"
    )


async def test_the_allow_list_opens_exactly_the_listed_addresses_and_networks() -> None:
    policy = UrlPolicy(allow_hosts=("127.0.0.1", "10.8.0.0/16"))
    assert (await policy.resolve("http://127.0.0.1:9/")).address == "127.0.0.1"
    assert (await policy.resolve("http://10.8.3.4/")).address == "10.8.3.4"
    assert "private" in await refusal(policy, "http://10.9.0.1/")
    assert "loopback" in await refusal(policy, "http://127.0.0.2/")


async def test_allowing_private_addresses_still_refuses_the_metadata_service() -> None:
    policy = UrlPolicy(allow_private=True)
    assert (await policy.resolve("http://192.168.0.10/")).address == "192.168.0.10"
    assert "metadata" in await refusal(policy, "http://169.254.169.254/")
    listed = UrlPolicy(allow_hosts=("169.254.169.254",))
    assert (await listed.resolve("http://169.254.169.254/")).address == "169.254.169.254"


def test_split_checks_syntax_without_network_access() -> None:
    assert UrlPolicy().split("HTTPS://Example.COM./x") == ("https", "example.com", 443)
    with pytest.raises(UrlRefused, match="no host"):
        UrlPolicy().split("http:///path")
    with pytest.raises(UrlRefused, match="not a valid URL"):
        UrlPolicy().split("http://example.com:99999/")
