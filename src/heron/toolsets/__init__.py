"""Built-in tool sets: perception, execution and the helpers they share."""
