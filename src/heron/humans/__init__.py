"""Requests to a human that survive a restart: approvals and questions as durable rows any
channel can answer (`desk.RequestDesk`), their store (`store.RequestStore`, SQLite in
`sqlite_store`), who may answer (`approvers`, configured in `[approvals]`: `config`), what an
"always" covers (`rules`), signed decisions (`signing`) and the console channel (`console`).
The status and decision words are `heron._support.vocabulary`'s."""
