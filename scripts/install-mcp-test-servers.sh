#!/usr/bin/env bash
# Installs the npm reference MCP servers that heron's MCP client tests talk to, into a
# project-local folder (default `.cache/npm`, override with HERON_MCP_NPM_PREFIX). The tests
# look for them there and fail with a pointer to this script when they are missing.
# Versions are pinned so a new upstream release cannot change the peers under the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${HERON_MCP_NPM_PREFIX:-.cache/npm}"
everything_version="2026.8.31"
filesystem_version="2026.8.31"

if ! command -v npm >/dev/null 2>&1; then
    echo "install-mcp-test-servers: npm is not installed (install Node.js 18 or newer)" >&2
    exit 1
fi

mkdir -p "$prefix"
# The cache folder is never part of the repository.
if [ ! -e .cache/.gitignore ] && [ "${prefix#.cache/}" != "$prefix" ]; then
    printf '*\n' > .cache/.gitignore
fi

npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@${everything_version}" \
    "@modelcontextprotocol/server-filesystem@${filesystem_version}"

for bin in mcp-server-everything mcp-server-filesystem; do
    if [ ! -x "$prefix/node_modules/.bin/$bin" ]; then
        echo "install-mcp-test-servers: $bin missing after install" >&2
        exit 1
    fi
done
echo "MCP test servers installed in $prefix/node_modules"
