"""Event triggers: producers inside heron that publish on the event bus.

- `jobs` (in `heron.always_on.jobs`) and `monitor`: detached background jobs and the shell
  monitors that turn their output into events;
- `timers`: one-shot, interval and cron timers with misfire policies;
- `heartbeat`: the periodic look-around and its silent all-clear;
- `system`: user inactivity and resource alerts;
- `subscriptions`: which inbound third-party events wake the agent;
- `tools`: the tools the agent uses to manage them;
- `runtime`: `TriggerRuntime`, all of them wired for one session (`heron serve`), their
  background loops in one task group (`heron.always_on.background`).
"""
