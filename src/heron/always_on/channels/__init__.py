"""Inbound channels: webhooks and mail turned into events on the bus."""
