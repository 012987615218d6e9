"""Which URLs the web tools may reach: scheme, host and the addresses a host resolves to.

The check runs on resolved addresses, not on the host name, because a public-looking name can
point at `127.0.0.1` or at a cloud metadata service. `UrlPolicy.resolve` answers with the one
address that passed, and the caller connects to exactly that address: a second DNS lookup (a
rebinding attack flips the answer between "check" and "connect") never happens. Every redirect
hop goes through `resolve` again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from heron.errors import HeronError

__all__ = ["METADATA_ADDRESSES", "ResolvedUrl", "UrlPolicy", "UrlRefused"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
    )
)
"""Cloud instance-metadata services: refused even when private addresses are allowed."""

_SCHEMES = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT, RFC 6598


class UrlRefused(HeronError):
    """The URL may not be fetched: wrong scheme, no host, unresolvable, or a forbidden address."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolvedUrl:
    """A URL that passed the policy, with the address the caller must connect to."""

    url: str
    scheme: str
    host: str
    """The host name as written in the URL (lower case, IPv6 without brackets)."""
    port: int
    address: str
    """The checked IP address; connect here, never to a fresh lookup of `host`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UrlPolicy:
    """Where fetches may go. By default: public http(s) addresses only.

    `allow_hosts` names hosts (`intranet.example`), addresses (`127.0.0.1`) or networks
    (`10.1.0.0/16`) that are allowed although they are private; tests use it for the loopback
    server. `allow_private` opens every private, loopback and link-local address except the
    cloud metadata services, which only an explicit `allow_hosts` entry opens.
    """

    allow_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    max_redirects: int = 5
    """Redirects followed per request; each hop is checked again."""

    def split(self, url: str) -> tuple[str, str, int]:
        """Check scheme and host without any network access; return (scheme, host, port)."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise UrlRefused(f"not a valid URL: {url!r} ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in _SCHEMES:
            shown = f"'{scheme}:'" if scheme else "no scheme"
            raise UrlRefused(f"only http:// and https:// URLs can be fetched; got {shown}")
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise UrlRefused(f"the URL has no host: {url!r}")
        return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]

    async def resolve(self, url: str) -> ResolvedUrl:
        """Check the URL, resolve its host once and return an address that may be contacted.

        Raises `UrlRefused` naming the reason when no resolved address is allowed.
        """
        scheme, host, port = self.split(url)
        addresses = await _lookup(host, port)
        problems: list[str] = []
        for address in addresses:
            problem = self.address_problem(host, address)
            if problem is None:
                return ResolvedUrl(
                    url=url.strip(), scheme=scheme, host=host, port=port, address=str(address)
                )
            problems.append(f"{address} is {problem}")
        listing = "; ".join(dict.fromkeys(problems))
        raise UrlRefused(f"refused to contact {host}: {listing}")

    def address_problem(self, host: str, address: IPAddress) -> str | None:
        """Why `address` (resolved from `host`) may not be contacted, or None when it may."""
        if self._allowed(host, address):
            return None
        plain = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        checked: IPAddress = plain or address
        if checked in METADATA_ADDRESSES or address in METADATA_ADDRESSES:
            return "a cloud metadata service (never reachable unless listed in allow_hosts)"
        if checked.is_unspecified or checked.is_multicast:
            return "not a unicast address"
        if checked.is_global and not checked.is_reserved:
            return None
        if self.allow_private:
            return None
        return f"{_category(checked)} (private addresses are refused unless allowed)"

    def _allowed(self, host: str, address: IPAddress) -> bool:
        for entry in self.allow_hosts:
            network = _network(entry)
            if network is None:
                if entry.lower().rstrip(".") == host.lower():
                    return True
            elif address.version == network.version and address in network:
                return True
        return False


def _network(entry: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return None


def _category(address: IPAddress) -> str:
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if address.is_private:
        return "a private address"
    return "not a public address"


async def _lookup(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UrlRefused(f"cannot resolve host {host!r}: {exc}") from None
    found: dict[IPAddress, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        # IPv6 socket addresses may carry a zone ("fe80::1%eth0"); the zone is not an address.
        text = str(sockaddr[0]).split("%", 1)[0]
        found[ipaddress.ip_address(text)] = None
    if not found:
        raise UrlRefused(f"host {host!r} resolved to no address")
    return list(found)
