"""The always-on half of heron (`heron serve`): the durable event bus and the event-driven loop
(`bus`), inbound channels (`channels`), detached background jobs (`jobs`), the triggers
(`triggers`), lifecycle hooks, structured background loops and the server that wires them."""
