"""Reaching the user: `notify` (`notify_user`) and its `NotificationStore`, with the SQLite
implementation in `sqlite_store`. The durable human requests (approvals and questions any
channel can answer) join this package the same way: a protocol next to their records, a
SQLite implementation beside it, one contract suite."""
