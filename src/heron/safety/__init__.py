"""The shared guards: what every tool, connector and front end checks before it acts or shows.

- `secrets`: the known secrets (provider keys, configured credentials), replaced by
  `«secret:NAME»` wherever they would enter the data path, and `Secret`, a value that never
  prints itself;
- `shapes`: text that only looks like a credential, masked for display;
- `redact`: both masked in everything rendered outside the model's data path (logs, events,
  approval prompts, audit entries, listings);
- `workspace`: model-supplied paths resolved inside the workspace root, byte-exact file access;
- `url_policy`: which URLs and resolved addresses outbound requests may reach;
- `command_policy`: a shell command parsed and classified as low, medium or high risk;
- `idempotency`: idempotency keys and the preflight → confirm protocol for tools that change
  the world (their `IdempotencyLedger` in SQLite: `sqlite_idempotency`);
- `signing`: heron's webhook HMAC, signed by every sender and checked by the webhook server.

The package sits low (layer 2): it may import only `heron._support`, `heron.errors`,
`heron.messages` and `heron.tools`, so that any package above can use it. Import the modules
themselves; this package exports nothing, so importing one guard never loads the others
(`command_policy` loads tree-sitter).
"""
