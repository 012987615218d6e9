from __future__ import annotations

import base64
import hashlib
import hmac
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from heron._support.canonical import canonical_json
from heron.turn.receipts import (
    RECEIPT_PROMPT_NOTE,
    RECEIPT_RE,
    ReceiptKey,
    ReceiptKeyStore,
    ReceiptScope,
    ReceiptSigner,
    parse_receipt,
    receipt_marker,
    verify_receipt,
)

KEY = ReceiptKey(key_id="0a1b2c3d", secret=bytes(range(32)))
OTHER_KEY = ReceiptKey(key_id="0a1b2c3d", secret=bytes(range(1, 33)))
ARGS = {"path": "notes.txt", "limit": 10}
TS = 1_711_547_700


def sign(
    key: ReceiptKey = KEY,
    *,
    tool: str = "file_read",
    arguments: Mapping[str, Any] = ARGS,
    output: str = "hello",
) -> str:
    return ReceiptSigner(key).sign(tool, arguments, output, timestamp=TS)


def verify(
    receipt: str,
    key: ReceiptKey = KEY,
    *,
    tool: str = "file_read",
    arguments: Mapping[str, Any] = ARGS,
    output: str = "hello",
) -> bool:
    return verify_receipt(receipt, key=key, tool=tool, arguments=arguments, output=output)


def test_canonical_json_is_compact_sorted_and_keeps_non_ascii() -> None:
    assert canonical_json({"b": [1, {"z": 1, "a": "é"}], "a": None}) == (
        '{"a":null,"b":[1,{"a":"é","z":1}]}'
    )


def test_same_key_inputs_and_timestamp_give_identical_receipts() -> None:
    assert sign() == sign()


def test_different_keys_give_different_receipts() -> None:
    assert sign(KEY) != sign(OTHER_KEY)


def test_receipt_has_prefix_key_id_timestamp_and_43_char_digest() -> None:
    receipt = sign()
    assert receipt.startswith(f"heron-receipt-0a1b2c3d-{TS}-")
    parsed = parse_receipt(receipt)
    assert parsed is not None
    key_id, ts, digest = parsed
    assert (key_id, ts, len(digest)) == ("0a1b2c3d", TS, 32)
    assert receipt == f"heron-receipt-0a1b2c3d-{TS}-" + base64.urlsafe_b64encode(digest).rstrip(
        b"="
    ).decode("ascii")


def test_digest_is_hmac_sha256_over_documented_message() -> None:
    message = f'file_read|{{"limit":10,"path":"notes.txt"}}|hello|{TS}'.encode()
    expected = hmac.new(KEY.secret, message, hashlib.sha256).digest()
    parsed = parse_receipt(sign())
    assert parsed is not None
    assert parsed[2] == expected


def test_signer_uses_clock_when_no_timestamp_is_given() -> None:
    signer = ReceiptSigner(KEY, clock=lambda: 1234.9)
    receipt = signer.sign("file_read", ARGS, "hello")
    assert receipt.startswith("heron-receipt-0a1b2c3d-1234-")
    assert signer.key_id == "0a1b2c3d"


def test_untampered_receipt_verifies() -> None:
    assert verify(sign())


@pytest.mark.parametrize(
    "change",
    [
        {"tool": "file_write"},
        {"arguments": {"path": "notes.txt", "limit": 11}},
        {"arguments": {"path": "notes.txt", "limit": "10"}},
        {"arguments": {"path": "notes.txt"}},
        {"output": "hello "},
        {"output": "(no output)"},
    ],
)
def test_receipt_fails_for_a_different_call(change: dict[str, Any]) -> None:
    assert not verify(sign(), **change)


def test_receipt_with_edited_timestamp_fails() -> None:
    receipt = sign()
    assert not verify(receipt.replace(f"-{TS}-", f"-{TS + 1}-"))


def test_receipt_fails_with_wrong_secret_under_same_key_id() -> None:
    assert not verify(sign(), key=OTHER_KEY)


def test_receipt_fails_with_a_key_of_another_id() -> None:
    other_id = ReceiptKey(key_id="ffffffff", secret=KEY.secret)
    assert not verify(sign(), key=other_id)


def test_argument_key_order_does_not_matter() -> None:
    reordered = {"limit": 10, "path": "notes.txt"}
    assert list(reordered) != list(ARGS)
    assert sign(arguments=reordered) == sign()
    assert verify(sign(), arguments=reordered)


def test_unicode_output_signs_and_verifies() -> None:
    output = "naïve café — 東京 🐦\u2028line"
    receipt = sign(output=output)
    assert verify(receipt, output=output)
    assert not verify(receipt, output=output.replace("🐦", "🐤"))


def test_pipe_in_tool_name_is_refused_so_messages_stay_unambiguous() -> None:
    # With a '|' allowed, tool "t" + args {} + output '{"a":1}|x' and tool "t|{}" + args {"a":1}
    # + output "x" would sign the same bytes.
    receipt = sign(tool="t", arguments={}, output='{"a":1}|x')
    assert not verify(receipt, tool="t|{}", arguments={"a": 1}, output="x")
    with pytest.raises(ValueError, match="must not contain"):
        sign(tool="t|{}")


def test_negative_timestamp_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        ReceiptSigner(KEY).sign("file_read", ARGS, "hello", timestamp=-1)


def _digest_part() -> str:
    return sign().rsplit("-", 1)[1]


@pytest.mark.parametrize(
    "receipt",
    [
        "",
        "heron-receipt-",
        "heron-receipt-0a1b2c3d",
        "heron-receipt-0a1b2c3d-",
        f"heron-receipt-0a1b2c3d-{TS}",
        f"heron-receipt-0a1b2c3d-{TS}-",
        f"heron-receipt-{TS}-" + "A" * 43,
        "heron-receipt-0a1b2c3d-abc-" + "A" * 43,
        "heron-receipt-0a1b2c3d--5-" + "A" * 43,
        f"heron-receipt-0A1B2C3D-{TS}-" + "A" * 43,
        f"heron-receipt-0a1b2c3d-{TS}-" + "A" * 42,
        f"heron-receipt-0a1b2c3d-{TS}-" + "A" * 44,
        f"heron-receipt-0a1b2c3d-{TS}-" + "A" * 42 + "=",
        f"heron-receipt-0a1b2c3d-{TS}-" + "A" * 42 + "!",
        f"heron-receipt-0a1b2c3d-{TS}-" + "A" * 20 + "+/" + "A" * 21,
        f"zc-receipt-{TS}-" + "A" * 43,
        "heron-receipt-0a1b2c3d-" + "9" * 5000 + "-" + "A" * 43,
        "heron-receipt-0a1b2c3d-١٢٣-" + "A" * 43,
    ],
)
def test_malformed_receipts_are_rejected_without_exceptions(receipt: str) -> None:
    assert parse_receipt(receipt) is None
    assert not verify(receipt)


def test_receipt_inside_other_text_is_not_accepted() -> None:
    receipt = sign()
    assert not verify(f" {receipt}")
    assert not verify(f"{receipt}\n")
    assert not verify(f"[receipt: {receipt}]")


def test_timestamp_with_leading_zero_is_rejected() -> None:
    receipt = sign().replace(f"-{TS}-", f"-0{TS}-")
    assert parse_receipt(receipt) is None
    assert not verify(receipt)


def test_digest_with_non_zero_spare_bits_is_rejected() -> None:
    receipt = sign()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = receipt[-1]
    # The last character carries 2 data bits and 4 zero bits; flipping a zero bit keeps the
    # decoded bytes but changes the spelling.
    forged = receipt[:-1] + alphabet[alphabet.index(last) ^ 1]
    parsed = parse_receipt(receipt)
    assert parsed is not None
    assert base64.urlsafe_b64decode(forged.rsplit("-", 1)[1] + "=") == parsed[2]
    assert parse_receipt(forged) is None
    assert not verify(forged)


def test_fabricated_well_formed_receipt_fails() -> None:
    assert not verify(f"heron-receipt-0a1b2c3d-{TS}-" + "A" * 43)


def test_receipt_pattern_finds_receipts_in_text() -> None:
    receipt = sign()
    match = RECEIPT_RE.search(f"result{receipt_marker(receipt)}")
    assert match is not None
    assert match.group(0) == receipt


def test_receipt_marker_is_appended_after_a_blank_line() -> None:
    assert receipt_marker("heron-receipt-x") == "\n\n[receipt: heron-receipt-x]"


def test_prompt_note_explains_marker_and_forbids_fabrication() -> None:
    assert "[receipt:" in RECEIPT_PROMPT_NOTE
    assert "Never write a receipt yourself" in RECEIPT_PROMPT_NOTE


def test_key_repr_does_not_show_the_secret() -> None:
    assert KEY.secret.hex() not in repr(KEY)
    assert repr(KEY.secret) not in repr(KEY)


@pytest.mark.parametrize(
    ("key_id", "secret"),
    [("0a1b2c3", bytes(32)), ("0A1B2C3D", bytes(32)), ("../x", bytes(32)), ("0a1b2c3d", b"x")],
)
def test_invalid_keys_are_refused(key_id: str, secret: bytes) -> None:
    with pytest.raises(ValueError):
        ReceiptKey(key_id=key_id, secret=secret)


def test_generated_keys_are_random_and_well_formed() -> None:
    first, second = ReceiptKey.generate(), ReceiptKey.generate()
    assert first.secret != second.secret
    assert len(first.secret) == 32
    assert len(first.key_id) == 8
    assert int(first.key_id, 16) >= 0


def test_key_store_round_trips_a_key(tmp_path: Path) -> None:
    store = ReceiptKeyStore(tmp_path)
    key = ReceiptKey.generate()
    store.save(key)
    assert ReceiptKeyStore(tmp_path).load(key.key_id) == key


def test_key_store_files_are_private(tmp_path: Path) -> None:
    key = ReceiptKey.generate()
    ReceiptKeyStore(tmp_path).save(key)
    key_dir = tmp_path / "receipt-keys"
    assert stat.S_IMODE(key_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((key_dir / f"{key.key_id}.key").stat().st_mode) == 0o600
    assert [p.name for p in key_dir.iterdir()] == [f"{key.key_id}.key"]


def test_key_store_returns_none_for_unknown_id(tmp_path: Path) -> None:
    assert ReceiptKeyStore(tmp_path).load("0a1b2c3d") is None


@pytest.mark.parametrize("key_id", ["../x", "../receipt-keys/0a1b2c3d", "0A1B2C3D", ""])
def test_key_store_rejects_ids_that_are_not_key_ids(tmp_path: Path, key_id: str) -> None:
    ReceiptKeyStore(tmp_path).save(KEY)
    # A valid key file one level up: naive path joining of "../x" would load it.
    (tmp_path / "x.key").write_text(bytes(32).hex())
    assert ReceiptKeyStore(tmp_path).load(key_id) is None


def test_saving_the_same_key_twice_is_harmless(tmp_path: Path) -> None:
    store = ReceiptKeyStore(tmp_path)
    store.save(KEY)
    store.save(KEY)
    assert store.load(KEY.key_id) == KEY


def test_key_store_never_overwrites_a_different_key_with_the_same_id(tmp_path: Path) -> None:
    store = ReceiptKeyStore(tmp_path)
    store.save(KEY)
    with pytest.raises(FileExistsError):
        store.save(OTHER_KEY)
    assert store.load(KEY.key_id) == KEY
    assert len(list((tmp_path / "receipt-keys").iterdir())) == 1


def test_corrupt_key_file_is_reported(tmp_path: Path) -> None:
    key_dir = tmp_path / "receipt-keys"
    key_dir.mkdir()
    (key_dir / "0a1b2c3d.key").write_text("not hex")
    with pytest.raises(ValueError, match="corrupt"):
        ReceiptKeyStore(tmp_path).load("0a1b2c3d")


def test_stored_key_verifies_receipts_from_an_earlier_process(tmp_path: Path) -> None:
    scope = ReceiptScope("run", store=ReceiptKeyStore(tmp_path))
    receipt = scope.new_run().sign("file_read", ARGS, "hello")
    parsed = parse_receipt(receipt)
    assert parsed is not None
    key = ReceiptKeyStore(tmp_path).load(parsed[0])
    assert key is not None
    assert verify(receipt, key=key)


def test_run_scope_rotates_keys_on_each_new_run(tmp_path: Path) -> None:
    scope = ReceiptScope("run", store=ReceiptKeyStore(tmp_path))
    first = scope.new_run()
    assert scope.signer() is first
    second = scope.new_run()
    assert second.key_id != first.key_id
    assert scope.signer() is second
    stored = {p.stem for p in (tmp_path / "receipt-keys").iterdir()}
    assert stored == {first.key_id, second.key_id}


def test_runtime_scope_keeps_one_key_for_its_lifetime(tmp_path: Path) -> None:
    scope = ReceiptScope("runtime", store=ReceiptKeyStore(tmp_path))
    first = scope.signer()
    assert scope.new_run() is first
    assert scope.signer() is first
    assert len(list((tmp_path / "receipt-keys").iterdir())) == 1


def test_scope_without_store_signs_in_memory_only() -> None:
    scope = ReceiptScope("run", clock=lambda: 42.0)
    receipt = scope.signer().sign("file_read", ARGS, "hello")
    assert receipt.startswith(f"heron-receipt-{scope.signer().key_id}-42-")


def test_scope_draws_a_new_key_when_the_id_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ReceiptKeyStore(tmp_path)
    store.save(KEY)
    fresh = ReceiptKey(key_id="12345678", secret=bytes(range(2, 34)))
    draws = iter([OTHER_KEY, fresh])
    monkeypatch.setattr(ReceiptKey, "generate", classmethod(lambda cls: next(draws)))
    signer = ReceiptScope("run", store=store).new_run()
    assert signer.key_id == "12345678"
    assert store.load(KEY.key_id) == KEY
    assert store.load("12345678") == fresh
