"""Layer 0 helpers every package may use: lazy exports, the state directory and its SQLite
opener (`state`), clocks, time formatting and canonical JSON."""
