"""The durable event bus and the event-driven agent loop."""
