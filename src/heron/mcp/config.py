"""MCP configuration: `[mcp]`, `[mcp.servers.NAME]` and `[[mcp.tool_filter_groups]]`.

A server is either a command heron launches and talks to over stdio (`command` + `args`) or a
Streamable HTTP endpoint (`url`). Every server's tools are namespaced `<server>__<tool>`, so a
server name may not contain `__`. Secrets never live in the file: a credential names the
environment variable of heron's own process that holds its value, where it goes (an environment
variable of a stdio server, or an HTTP header) and when it expires. An expired credential is
never handed out; the server refuses to start until it is renewed. An HTTP server may instead
use MCP's OAuth (`auth = "oauth"`, `[mcp.servers.NAME.oauth]`): heron then obtains, stores and
refreshes its tokens itself (`heron.mcp.auth`).

`import_mcp_json` reads the `mcpServers` JSON format shared by Claude Desktop, Cursor, Cline and
VS Code (`servers`), so existing set-ups can be brought over.

Example::

    [mcp]
    exposure = "auto"                 # direct below `deferred_threshold` tools, deferred above

    [mcp.servers.files]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/srv/docs"]
    disabled_tools = ["*write*", "move_file"]

    [mcp.servers.tickets]
    url = "https://tickets.example.com/mcp"
    timeout_s = 60
    [mcp.servers.tickets.credentials.token]
    from_env = "TICKETS_TOKEN"
    header = "Authorization"
    prefix = "Bearer "
    expires = 2026-12-31T00:00:00Z

    [mcp.servers.tracker]
    url = "https://tracker.example.com/mcp"
    auth = "oauth"                    # discovery, registration, PKCE, refresh: `heron mcp login`
    [mcp.servers.tracker.oauth]
    scopes = ["issues:read"]

    [[mcp.tool_filter_groups]]
    mode = "dynamic"
    tools = ["tickets__*"]
    keywords = ["ticket", "incident"]
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from heron.errors import ConfigurationError

__all__ = [
    "ApprovalMode",
    "CapabilityLabel",
    "McpConfig",
    "McpConfigError",
    "McpCredential",
    "McpOAuthConfig",
    "McpServerConfig",
    "ToolFilterGroup",
    "import_mcp_json",
    "name_matches",
]

CapabilityLabel = Literal["private_data", "untrusted_content", "sends_out"]
"""Capability labels of a tool: reads private data, ingests untrusted content, sends data out."""

ApprovalMode = Literal["first-use", "explicit"]
"""How an unpinned server is admitted: pinned at its first start, or only by an operator."""

_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


class McpConfigError(ConfigurationError, ValueError):
    """A mistake in MCP configuration; the message names every problem found."""


def name_matches(pattern: str, name: str) -> bool:
    """Glob match for tool names: `*` matches any run of characters (several `*` allowed).

    Only `*` is special; `?` and `[` are literal because tool names may contain them.
    """
    if "*" not in pattern:
        return pattern == name
    escaped = pattern.replace("[", "[[]").replace("?", "[?]")
    return fnmatchcase(name, escaped)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class McpCredential(_Section):
    """One least-privilege credential for one server, read from heron's environment at start."""

    from_env: str
    """Environment variable of heron's process that holds the secret value."""
    env: str | None = None
    """Stdio servers: the environment variable the server receives the value in."""
    header: str | None = None
    """HTTP servers: the request header that carries the value."""
    prefix: str = ""
    """Put before the value, e.g. `"Bearer "` for an Authorization header."""
    expires: datetime | None = None
    """After this instant the credential is refused and the server does not start."""
    scope: str = ""
    """What the credential allows (documentation for the operator; shown by `heron mcp`)."""

    @model_validator(mode="after")
    def _one_target(self) -> McpCredential:
        if (self.env is None) == (self.header is None):
            raise ValueError("a credential goes to exactly one of `env` or `header`")
        return self

    def expired(self, now: datetime) -> bool:
        """True once `expires` has passed (a naive `expires` is taken as UTC)."""
        if self.expires is None:
            return False
        expires = self.expires if self.expires.tzinfo else self.expires.replace(tzinfo=UTC)
        return now >= expires


class McpOAuthConfig(_Section):
    """`[mcp.servers.NAME.oauth]`: how heron authorizes itself to a server with `auth = "oauth"`.

    Everything is optional: by default heron discovers the authorization server from the MCP
    server's protected-resource metadata, registers itself dynamically, and asks for the scopes
    the server's challenge names. Secrets never live here: a pre-registered client's secret is
    read from `client_secret_env`, a signing key from `private_key_env`.
    """

    grant: Literal["authorization_code", "client_credentials", "identity_assertion"] = (
        "authorization_code"
    )
    """`authorization_code`: an operator consents once (PKCE); `client_credentials`: a machine
    client with a pre-registered id and a secret (or a private key), no consent step;
    `identity_assertion`: enterprise-managed (SEP-990), the identity provider's ID token is
    exchanged for access, no consent step (`id_token_env`, `idp_*`, `issuer`)."""
    scopes: list[str] = Field(default_factory=list)
    """Scopes asked for on top of those the server's challenge or metadata names."""
    client_id: str | None = None
    """A pre-registered client id (no dynamic registration)."""
    client_secret_env: str | None = None
    """Environment variable of heron's process holding the pre-registered client's secret."""
    token_endpoint_auth_method: (
        Literal["none", "client_secret_post", "client_secret_basic", "private_key_jwt"] | None
    ) = None
    """How the pre-registered client authenticates at the token endpoint (default: the secret
    in a Basic header when there is one, else none; `private_key_jwt` with `private_key_env`)."""
    private_key_env: str | None = None
    """`client_credentials` with `private_key_jwt`: environment variable holding the PEM key."""
    signing_algorithm: str = "ES256"
    """The JWS algorithm of `private_key_env`'s assertions."""
    issuer: str | None = None
    """The authorization server a pre-registered client belongs to; its secret is sent nowhere
    else (`client_credentials`)."""
    client_metadata_url: str | None = None
    """An https URL of heron's client-ID metadata document, used as the client id by
    authorization servers that support them instead of dynamic registration."""
    client_name: str = "heron"
    """The name shown on the consent page (dynamic registration)."""
    redirect_uri: str | None = None
    """Where the authorization server sends the operator back to; default: the consent
    channel's (the gateway's callback at `[gateway] public_url`, else a loopback listener)."""
    refresh_margin_s: float = Field(default=60.0, ge=0, le=3600)
    """Refresh the access token this long before it expires."""
    id_token_env: str | None = None
    """`identity_assertion`: environment variable holding the operator's ID token from the
    identity provider."""
    idp_token_endpoint: str | None = None
    """`identity_assertion`: the identity provider's token endpoint (RFC 8693 exchange)."""
    idp_client_id: str | None = None
    """`identity_assertion`: heron's client id at the identity provider."""
    idp_client_secret_env: str | None = None
    """`identity_assertion`: environment variable holding that client's secret, if it has one."""

    @model_validator(mode="after")
    def _consistent(self) -> McpOAuthConfig:
        if self.grant == "client_credentials":
            if self.client_id is None:
                raise ValueError("grant = 'client_credentials' needs a pre-registered `client_id`")
            if (self.client_secret_env is None) == (self.private_key_env is None):
                raise ValueError(
                    "grant = 'client_credentials' needs exactly one of `client_secret_env` or "
                    "`private_key_env`"
                )
        elif self.private_key_env is not None:
            raise ValueError("`private_key_env` applies to grant = 'client_credentials' only")
        idp = ("id_token_env", "idp_token_endpoint", "idp_client_id")
        if self.grant == "identity_assertion":
            needed = ("client_id", "client_secret_env", "issuer", *idp)
            missing = [name for name in needed if getattr(self, name) is None]
            if missing:
                raise ValueError(f"grant = 'identity_assertion' needs {', '.join(missing)}")
        elif any(getattr(self, name) is not None for name in (*idp, "idp_client_secret_env")):
            raise ValueError("`id_token_env` and `idp_*` apply to grant = 'identity_assertion'")
        if self.client_secret_env is not None and self.client_id is None:
            raise ValueError("`client_secret_env` needs the pre-registered `client_id`")
        if self.client_metadata_url is not None and not self.client_metadata_url.startswith(
            "https://"
        ):
            raise ValueError("`client_metadata_url` must be an https:// URL")
        return self

    def client_secret(self) -> str | None:
        """The pre-registered client's secret from the environment (None when not configured)."""
        if self.client_secret_env is None:
            return None
        return os.environ.get(self.client_secret_env) or None


class McpServerConfig(_Section):
    """`[mcp.servers.NAME]`: how to reach one MCP server and which of its tools to use."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for a stdio server (heron passes only a safe base environment)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers for a Streamable HTTP server."""
    enabled: bool = True
    timeout_s: float = Field(default=180.0, gt=0, le=3600)
    """Per-call timeout; a call that runs longer is cancelled on the server and fails."""
    startup_timeout_s: float = Field(default=30.0, gt=0, le=600)
    idle_timeout_s: float | None = Field(default=600.0, gt=0)
    """Stop the server after this long without calls; `None` keeps it running."""
    health_interval_s: float | None = Field(default=60.0, gt=0)
    """How often a running server is checked (it re-lists its tools); `None` disables."""
    enabled_tools: list[str] | None = None
    """Globs of the server's own tool names to use; `None` means all."""
    disabled_tools: list[str] = Field(default_factory=list)
    """Globs of the server's own tool names never to use (wins over `enabled_tools`)."""
    trusted: bool = False
    """Take the server's tool annotations (read-only, destructive, …) at face value."""
    credentials: dict[str, McpCredential] = Field(default_factory=dict)
    auth: Literal["none", "oauth"] = "none"
    """`oauth`: heron authorizes itself with MCP's OAuth (Streamable HTTP servers only)."""
    oauth: McpOAuthConfig = Field(default_factory=McpOAuthConfig)
    """Settings of `auth = "oauth"`."""
    capabilities: dict[str, list[CapabilityLabel]] = Field(default_factory=dict)
    """Operator-declared capability labels by tool-name glob; they replace the heuristics."""
    protocol: Literal["auto", "legacy"] = "auto"
    """`legacy` skips the 2026 discovery probe (one round trip less for older servers)."""
    resources_as_tools: bool = False
    """Also expose this server's resources and prompts through the `mcp_resources` and
    `mcp_prompts` tools (they are always reachable through the manager)."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of `command` (stdio) or `url` (Streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"`url` must be an http:// or https:// URL, got {self.url!r}")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("`args`, `env` and `cwd` apply to stdio servers only")
        if self.command is not None and self.headers:
            raise ValueError("`headers` apply to Streamable HTTP servers only")
        if self.auth == "oauth" and self.url is None:
            raise ValueError('`auth = "oauth"` applies to Streamable HTTP (`url`) servers only')
        if "oauth" in self.model_fields_set and self.auth != "oauth":
            raise ValueError('`oauth` settings need `auth = "oauth"`')
        for name, cred in self.credentials.items():
            if self.command is not None and cred.header is not None:
                raise ValueError(f"credential {name!r}: a stdio server takes `env`, not `header`")
            if self.url is not None and cred.env is not None:
                raise ValueError(f"credential {name!r}: an HTTP server takes `header`, not `env`")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def tool_enabled(self, tool: str) -> bool:
        """Whether the server's own tool name passes `enabled_tools` / `disabled_tools`."""
        if any(name_matches(p, tool) for p in self.disabled_tools):
            return False
        return self.enabled_tools is None or any(name_matches(p, tool) for p in self.enabled_tools)

    def credential_problems(self, now: datetime | None = None) -> list[str]:
        """Why the credentials cannot be handed out now (expired, missing); empty when fine."""
        moment = now or datetime.now(UTC)
        problems = []
        oauth = self.oauth
        if self.auth == "oauth" and oauth.client_secret_env and not oauth.client_secret():
            problems.append(
                f"oauth: environment variable {oauth.client_secret_env} (the client secret) "
                "is not set"
            )
        for env, what in (
            (oauth.private_key_env, "the signing key"),
            (oauth.id_token_env, "the ID token"),
        ):
            if self.auth == "oauth" and env and not os.environ.get(env):
                problems.append(f"oauth: environment variable {env} ({what}) is not set")
        for name, cred in sorted(self.credentials.items()):
            if cred.expired(moment):
                assert cred.expires is not None
                problems.append(
                    f"credential {name!r} expired at {cred.expires.isoformat()}; renew it"
                )
            elif not os.environ.get(cred.from_env):
                problems.append(
                    f"credential {name!r}: environment variable {cred.from_env} is not set"
                )
        return problems

    def resolved_env(self) -> dict[str, str]:
        """`env` plus credential values destined for the environment (call after checking)."""
        env = dict(self.env)
        for cred in self.credentials.values():
            if cred.env is not None:
                env[cred.env] = cred.prefix + os.environ.get(cred.from_env, "")
        return env

    def resolved_headers(self) -> dict[str, str]:
        """`headers` plus credential values destined for headers (call after checking)."""
        headers = dict(self.headers)
        for cred in self.credentials.values():
            if cred.header is not None:
                headers[cred.header] = cred.prefix + os.environ.get(cred.from_env, "")
        return headers


class ToolFilterGroup(_Section):
    """`[[mcp.tool_filter_groups]]`: which MCP tools a turn may see.

    `always` groups are visible every turn (and pre-activated in deferred mode); `dynamic`
    groups only when the user message contains one of `keywords` (case-insensitive). Groups
    apply to MCP tools only and never grant what policy denies.
    """

    mode: Literal["always", "dynamic"] = "dynamic"
    tools: list[str]
    """Globs over namespaced names (`files__*`)."""
    keywords: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _keywords_for_dynamic(self) -> ToolFilterGroup:
        if self.mode == "dynamic" and not any(k.strip() for k in self.keywords):
            raise ValueError("a dynamic filter group needs at least one keyword")
        return self


class McpConfig(_Section):
    """`[mcp]`: the MCP client as a whole."""

    enabled: bool = True
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    exposure: Literal["auto", "direct", "deferred"] = "auto"
    """`auto`: every MCP tool schema is sent directly while the catalogue is smaller than
    `deferred_threshold`; above it the model gets `tool_search` and a compact catalogue."""
    deferred_threshold: int = Field(default=100, ge=0)
    approval: ApprovalMode = "first-use"
    """`first-use` pins an unknown server the first time it starts (unless its descriptions
    carry high-severity findings); `explicit` needs `heron mcp approve NAME` first. A pinned
    server whose version or definitions changed is refused until re-approved, in both modes."""
    search_min_score: float = Field(default=1.0, ge=0)
    """`tool_search` answers "nothing found" when no tool scores at least this much."""
    tool_filter_groups: list[ToolFilterGroup] = Field(default_factory=list)
    token_key_env: str = "HERON_TOKEN_KEY"
    """Environment variable holding the key that encrypts OAuth tokens at rest (at least 32
    characters). Unset: tokens are stored unencrypted, owner-only (mode 0600)."""

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        bad = [n for n in servers if not _SERVER_NAME.match(n) or "__" in n]
        if bad:
            raise ValueError(
                "server names use letters, digits, '-' and single '_' (no '__', which "
                f"separates server and tool): {', '.join(repr(n) for n in bad)}"
            )
        return servers

    def enabled_servers(self) -> dict[str, McpServerConfig]:
        """The servers to use, in name order (deterministic catalogues)."""
        if not self.enabled:
            return {}
        return {n: s for n, s in sorted(self.servers.items()) if s.enabled}


# Keys of the common JSON format that carry nothing heron uses (per-client UI settings).
_IGNORED_JSON_KEYS = frozenset(
    {"alwaysAllow", "autoApprove", "description", "disabledTools", "transportType", "type"}
)
_JSON_TYPES = frozenset({"stdio", "http", "streamable-http", "streamableHttp"})


def _problems(exc: ValidationError, where: str) -> list[str]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        place = f"{where}.{loc}" if loc else where
        out.append(f"{place}: {err['msg']}")
    return out


def _server_from_json(
    name: str, raw: Mapping[str, Any]
) -> tuple[McpServerConfig | None, list[str]]:
    where = f"mcpServers.{name}"
    kind = raw.get("type", raw.get("transportType"))
    if kind is not None and kind not in _JSON_TYPES:
        return None, [f"{where}: transport {kind!r} is not supported (use stdio or http)"]
    unknown = sorted(
        k
        for k in raw
        if k not in _IGNORED_JSON_KEYS
        and k not in {"command", "args", "cwd", "url", "env", "headers", "disabled", "timeout"}
    )
    if unknown:
        return None, [f"{where}: unknown key {k!r}" for k in unknown]
    data: dict[str, Any] = {
        k: raw[k] for k in ("command", "args", "cwd", "url", "env", "headers") if k in raw
    }
    if raw.get("disabled") is True:
        data["enabled"] = False
    if isinstance(raw.get("timeout"), int | float) and raw["timeout"] > 0:
        # Cline writes seconds; values above an hour can only be milliseconds.
        timeout = float(raw["timeout"])
        data["timeout_s"] = timeout / 1000 if timeout > 3600 else timeout
    disabled = raw.get("disabledTools")
    if isinstance(disabled, list):
        data["disabled_tools"] = disabled
    try:
        return McpServerConfig.model_validate(data), []
    except ValidationError as exc:
        return None, _problems(exc, where)


def import_mcp_json(path: Path) -> dict[str, McpServerConfig]:
    """Read servers from an `mcpServers` (or VS Code `servers`) JSON file.

    Returns the servers by name, ready to go under `[mcp.servers]`. Raises `McpConfigError`
    naming the file and every problem (unsupported transports such as SSE, unknown keys, bad
    values, names that cannot be namespaced).
    """
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise McpConfigError(f"{path}: cannot read MCP JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise McpConfigError(f"{path}: expected a JSON object")
    servers = document.get("mcpServers", document.get("servers"))
    if not isinstance(servers, dict):
        raise McpConfigError(f"{path}: no 'mcpServers' object")
    found: dict[str, McpServerConfig] = {}
    problems: list[str] = []
    for name, raw in servers.items():
        if not isinstance(raw, dict):
            problems.append(f"mcpServers.{name}: expected an object")
            continue
        if not _SERVER_NAME.match(name) or "__" in name:
            problems.append(
                f"mcpServers.{name}: server names use letters, digits, '-' and single '_'"
            )
            continue
        server, errs = _server_from_json(name, raw)
        problems.extend(errs)
        if server is not None:
            found[name] = server
    if problems:
        raise McpConfigError(f"{path}: " + "; ".join(problems))
    return found
