"""The durable audit trails, above the engine: what was decided before each tool call and what
actually ran.

- `executions`: `ExecutionAuditTrail`, the observer that records every executed call, and its
  `ExecutionStore` protocol;
- `sqlite_store`: both trails in SQLite — `SqliteApprovalAudit` (the engine's
  `heron.turn.approval_audit.AuditLog`) and `SqliteExecutionStore`.
"""
