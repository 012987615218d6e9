"""Idempotency keys, confirmation tokens and the preflight → confirm helper."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from heron import ToolResult
from heron._support.clock import FakeClock
from heron.safety.idempotency import (
    ConfirmationError,
    Confirmations,
    IdempotencyStore,
    InvalidAction,
    NotPerformed,
    Plan,
    PreflightConfirm,
)
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger

ARGS = {"to": ["ana@example.com"], "amount": 120}


class Action:
    """Counts executions; fails the way it is told to."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.runs = 0
        self.fail = fail

    async def __call__(self) -> ToolResult:
        self.runs += 1
        if self.fail is not None:
            raise self.fail
        return ToolResult.ok(f"paid, run {self.runs}", data={"receipt": "r-1"})


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> IdempotencyStore:
    return IdempotencyStore(SqliteIdempotencyLedger(tmp_path), clock=clock.time)


async def test_a_retry_with_the_same_key_returns_the_first_result_without_acting(
    store: IdempotencyStore, tmp_path: Path, clock: FakeClock
) -> None:
    action = Action()
    first = await store.run_once("pay", "inv-7", ARGS, action)
    again = await store.run_once("pay", "inv-7", dict(reversed(ARGS.items())), action)
    assert action.runs == 1
    assert first.output == "paid, run 1"
    assert again.success and again.output.endswith("nothing was done again]\npaid, run 1")
    assert again.data == {"receipt": "r-1", "replayed": True}
    # A new store object on the same state directory (a restart) still knows the key.
    reopened = IdempotencyStore(SqliteIdempotencyLedger(tmp_path), clock=clock.time)
    assert (await reopened.run_once("pay", "inv-7", ARGS, action)).data["replayed"] is True
    assert action.runs == 1
    # Keys are per tool.
    assert (await store.run_once("refund", "inv-7", ARGS, action)).output == "paid, run 2"


async def test_the_same_key_with_different_arguments_is_refused(store: IdempotencyStore) -> None:
    action = Action()
    await store.run_once("pay", "inv-7", ARGS, action)
    other = await store.run_once("pay", "inv-7", {**ARGS, "amount": 999}, action)
    assert not other.success and action.runs == 1
    assert other.error == (
        "idempotency_key 'inv-7' was already used at 2023-11-14T22:13:20Z for a pay call with "
        "different arguments; a key names one action — use a new key for a different one"
    )


async def test_a_certain_no_effect_failure_frees_the_key(store: IdempotencyStore) -> None:
    refused = Action(fail=NotPerformed("card declined before charging"))
    result = await store.run_once("pay", "inv-7", ARGS, refused)
    assert not result.success and result.error == "card declined before charging"
    assert (await store.run_once("pay", "inv-7", ARGS, Action())).output == "paid, run 1"


async def test_a_crash_records_outcome_unknown_and_a_retry_does_not_act(
    store: IdempotencyStore,
) -> None:
    crash = Action(fail=ConnectionResetError("peer reset"))
    with pytest.raises(ConnectionResetError):
        await store.run_once("pay", "inv-7", ARGS, crash)
    retry = Action()
    answer = await store.run_once("pay", "inv-7", ARGS, retry)
    assert retry.runs == 0 and not answer.success
    assert "outcome unknown: ConnectionResetError while running pay" in (answer.error or "")


async def test_a_call_still_running_makes_a_concurrent_retry_answer_unknown(
    store: IdempotencyStore,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow() -> ToolResult:
        started.set()
        await release.wait()
        return ToolResult.ok("done")

    first = asyncio.create_task(store.run_once("pay", "inv-7", ARGS, slow))
    await asyncio.wait_for(started.wait(), 5)
    retry = Action()
    answer = await store.run_once("pay", "inv-7", ARGS, retry)
    assert retry.runs == 0
    assert "has no recorded result (still running, or it stopped part-way)" in (answer.error or "")
    release.set()
    assert (await first).output == "done"


async def test_keys_are_forgotten_after_their_ttl(tmp_path: Path, clock: FakeClock) -> None:
    store = IdempotencyStore(SqliteIdempotencyLedger(tmp_path), ttl_s=60, clock=clock.time)
    action = Action()
    await store.run_once("pay", "inv-7", ARGS, action)
    clock.advance(60)
    assert store.purge_expired() == 1
    assert (await store.run_once("pay", "inv-7", ARGS, action)).output == "paid, run 2"


def test_a_token_confirms_only_the_exact_arguments_once(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    confirmations = Confirmations(store)
    issued = confirmations.issue("pay", ARGS)
    with pytest.raises(ConfirmationError) as changed:
        confirmations.redeem("pay", {**ARGS, "amount": 121}, issued.token)
    assert changed.value.reason == "mismatch"
    with pytest.raises(ConfirmationError) as other_tool:
        confirmations.redeem("refund", ARGS, issued.token)
    assert other_tool.value.reason == "mismatch"
    assert confirmations.redeem("pay", dict(reversed(ARGS.items())), issued.token) == (
        issued.action_id
    )
    with pytest.raises(ConfirmationError, match="already used") as reused:
        confirmations.redeem("pay", ARGS, issued.token)
    assert reused.value.reason == "used"


def test_tokens_expire_and_cannot_be_forged(store: IdempotencyStore, clock: FakeClock) -> None:
    confirmations = Confirmations(store, ttl_s=600)
    issued = confirmations.issue("pay", ARGS)
    clock.advance(600)
    with pytest.raises(ConfirmationError, match="expired at") as expired:
        confirmations.redeem("pay", ARGS, issued.token)
    assert expired.value.reason == "expired"
    later = confirmations.issue("pay", ARGS)
    nonce, _, mac = later.token.removeprefix("cfm-").split("-", 2)
    stretched = f"cfm-{nonce}-{int(clock.time()) + 10**6}-{mac}"  # a longer expiry, same MAC
    elsewhere = Confirmations(store).issue("pay", ARGS).token  # another secret
    for token in (stretched, elsewhere, "cfm-nonsense"):
        with pytest.raises(ConfirmationError):
            confirmations.redeem("pay", ARGS, token)
    assert confirmations.redeem("pay", ARGS, later.token) == later.action_id


async def test_preflight_returns_the_plan_and_a_token_and_confirm_executes_once(
    store: IdempotencyStore,
) -> None:
    gate = PreflightConfirm("pay", Confirmations(store))
    action, ids = Action(), []

    def plan(action_id: str) -> Plan:
        ids.append(action_id)
        return Plan(summary="charge 120 EUR to ana", execute=action, data={"amount": 120})

    pre = await gate.run(ARGS, confirmation_token=None, idempotency_key=None, plan=plan)
    assert action.runs == 0 and pre.success
    assert pre.output.startswith("PREFLIGHT — nothing has been done yet.\ncharge 120 EUR to ana")
    token = pre.data["confirmation_token"]
    assert f'plus confirmation_token="{token}" (single use, valid until' in pre.output
    assert pre.data["amount"] == 120 and pre.data["phase"] == "preflight"
    done = await gate.run(ARGS, confirmation_token=token, idempotency_key=None, plan=plan)
    assert done.output == "paid, run 1" and ids[0] == ids[1]  # the same action id both times
    again = await gate.run(ARGS, confirmation_token=token, idempotency_key=None, plan=plan)
    assert not again.success and "already used" in (again.error or "") and action.runs == 1


async def test_invalid_arguments_get_no_token(store: IdempotencyStore) -> None:
    gate = PreflightConfirm("pay", Confirmations(store))

    def plan(action_id: str) -> Plan:
        raise InvalidAction("amount must be positive")

    result = await gate.run(ARGS, confirmation_token=None, idempotency_key=None, plan=plan)
    assert not result.success and result.error == "amount must be positive"
    assert result.data == {"error": "invalid_arguments"}


@pytest.mark.parametrize(
    ("failure", "detail"),
    [
        (
            ConnectionResetError("connection reset after sending"),
            "ConnectionResetError: connection",
        ),
        (None, "no answer within 0.05 s"),  # a hang: the action never returns
    ],
)
async def test_a_failed_or_timed_out_execution_is_outcome_unknown_and_never_retried(
    store: IdempotencyStore, failure: BaseException | None, detail: str
) -> None:
    gate = PreflightConfirm("pay", Confirmations(store), timeout_s=0.05)
    runs = 0

    async def execute() -> ToolResult:
        nonlocal runs
        runs += 1
        if failure is not None:
            raise failure
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def plan(action_id: str) -> Plan:
        return Plan(summary="charge", execute=execute, if_unknown="look at the bank statement")

    pre = await gate.run(ARGS, confirmation_token=None, idempotency_key="k", plan=plan)
    token = pre.data["confirmation_token"]
    result = await gate.run(ARGS, confirmation_token=token, idempotency_key="k", plan=plan)
    assert runs == 1 and not result.success
    error = result.error or ""
    assert error.startswith(f"outcome unknown: {detail}")
    assert "Check before retrying (look at the bank statement)" in error
    assert "start again with a new preflight" in error
    retry = await gate.run(ARGS, confirmation_token=token, idempotency_key="k", plan=plan)
    assert runs == 1 and "outcome unknown" in (retry.error or "")


async def test_a_refused_execution_says_nothing_happened_and_frees_the_key(
    store: IdempotencyStore,
) -> None:
    gate = PreflightConfirm("pay", Confirmations(store))
    action = Action(fail=NotPerformed("card declined"))

    def plan(action_id: str) -> Plan:
        return Plan(summary="charge", execute=action)

    token = (await gate.run(ARGS, confirmation_token=None, idempotency_key="k", plan=plan)).data[
        "confirmation_token"
    ]
    result = await gate.run(ARGS, confirmation_token=token, idempotency_key="k", plan=plan)
    assert result.error == (
        "not done: card declined. Nothing took effect, but the confirmation token is used up — "
        "start again with a new preflight"
    )
    action.fail = None
    pre = await gate.run(ARGS, confirmation_token=None, idempotency_key="k", plan=plan)
    assert pre.data["phase"] == "preflight"  # the key is free again
    done = await gate.run(
        ARGS, confirmation_token=pre.data["confirmation_token"], idempotency_key="k", plan=plan
    )
    assert done.output == "paid, run 2"


async def test_a_preflight_with_a_used_key_returns_the_first_result(
    store: IdempotencyStore,
) -> None:
    gate = PreflightConfirm("pay", Confirmations(store))
    action = Action()

    def plan(action_id: str) -> Plan:
        return Plan(summary="charge", execute=action)

    pre = await gate.run(ARGS, confirmation_token=None, idempotency_key="k", plan=plan)
    await gate.run(
        ARGS, confirmation_token=pre.data["confirmation_token"], idempotency_key="k", plan=plan
    )
    again = await gate.run(ARGS, confirmation_token=None, idempotency_key="k", plan=plan)
    assert again.data["replayed"] is True and "paid, run 1" in again.output
    changed = await gate.run(
        {**ARGS, "amount": 5}, confirmation_token=None, idempotency_key="k", plan=plan
    )
    assert not changed.success and "different arguments" in (changed.error or "")
    assert action.runs == 1


async def test_a_cancelled_call_leaves_its_key_outcome_unknown(store: IdempotencyStore) -> None:
    started = asyncio.Event()

    async def hang() -> ToolResult:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    task = asyncio.create_task(store.run_once("pay", "inv-7", ARGS, hang))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    retry = Action()
    answer = await store.run_once("pay", "inv-7", ARGS, retry)
    assert retry.runs == 0
    assert "outcome unknown: CancelledError while running pay" in (answer.error or "")
