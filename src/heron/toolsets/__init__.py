"""Built-in tool sets: heron's own tools over this machine — the workspace's files and
documents, processes (`shell`), the sandboxed interpreter (`python_exec`), generic web fetch,
search and the browser — and the helpers they share. Clients of one named outside service are
in `heron.connectors`."""
