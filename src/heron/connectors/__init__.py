"""Connectors: clients of one named outside service or account — mail (`mail`), calendars
(`calendar`), GitHub, Notion pages, public-data APIs (`public_data`) and outbound webhooks —
sharing one HTTP client (`http_api`). heron's own tools over this machine are in
`heron.toolsets`."""
