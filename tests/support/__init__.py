"""Helpers shared by the test suites: real loopback peers (provider protocol servers, MCP
servers), the `heron` command in a scratch directory, the engine's event recorder, bounded
waits and the fake clock. Importable as `support.*` (pytest's `pythonpath = ["tests"]`)."""
