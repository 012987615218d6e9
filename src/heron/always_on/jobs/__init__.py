"""Detached background jobs: started through a supervisor, tracked in SQLite, reported on the
event bus, and still there after heron restarts. See `heron.always_on.jobs.manager`."""
