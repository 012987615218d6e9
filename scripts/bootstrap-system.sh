#!/usr/bin/env bash
# System packages the test suite uses as real peers: bubblewrap (namespace sandbox),
# tesseract (OCR), Chromium (browser tool), PostgreSQL (the shared store; the tests start their
# own server from its binaries, `tests/support/postgres.py`), and the npm reference MCP servers.
# Installs what is missing when run as root (CI and this project's machines are root);
# otherwise it says what to install and carries on.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v tesseract >/dev/null 2>&1 || need+=(tesseract-ocr tesseract-ocr-eng)
[ -x /usr/bin/chromium ] || need+=(chromium)
# Debian keeps the server binaries (initdb, pg_ctl) outside PATH, one directory per version.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "bootstrap: please install: ${need[*]} (tests that need them will say so)" >&2
    fi
fi

bash scripts/install-mcp-test-servers.sh
bash scripts/run-mcp-conformance.sh --install-only  # Node 22 + the MCP conformance suite
