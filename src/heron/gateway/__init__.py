"""The gateway: the HTTP API, durable event streams and web console of `heron serve`
(docs/gateway.md)."""
