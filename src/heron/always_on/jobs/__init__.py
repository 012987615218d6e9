"""Detached background jobs: started through a supervisor, recorded in a `JobStore` (SQLite by
default), reported on the event bus, and still there after heron restarts. See
`heron.always_on.jobs.manager`."""
