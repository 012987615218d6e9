"""Sub-agents: agent definitions, the runtime that runs each child as a session on the bus,
the tools that spawn, message, cancel and list them, and their durable records."""
