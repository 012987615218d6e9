"""Telemetry: metrics (`heron.telemetry.metrics`), operator alerts (`heron.telemetry.alerts`)
and OpenTelemetry (`heron.telemetry.otel`).

Each piece plugs into the engine as an `Observer` for tool calls, plus small calls the engine
makes for runs and model calls; `heron.turn.observer.FanOutObserver` lets one agent feed
several of them. OpenTelemetry is optional (`pip install 'heron[telemetry]'`): only
`heron.telemetry.otel` needs it, and it imports the SDK when an exporter is actually built.
"""
