"""Reaching people: the model's tools (`tools`: `send_message`, `send_card`,
`send_notification`; `asking`: `request_human_approval`, `request_human_input` over the durable
request desk), the `Card` model (`cards`), the one message store (`store`, SQLite in
`sqlite_store`), the `Outbox` that routes by urgency, preference and quiet hours and recalls
unread urgent messages (`outbox`), the outbound channels (`channels`: console, mail, webhook,
IM), the agent's own identity (`identity`), the configuration (`config`), signed action and
reply tokens (`tokens`), mail answers (`replies`, `mail_auth`; the mail channel of the durable
requests: `mail_requests`), the outbox of a process (`setup`) and the system-prompt section on
when to message and when to ask (`prompt`). Urgency is `heron._support.vocabulary.Urgency`,
the one vocabulary of the bus, the messages and the requests."""
