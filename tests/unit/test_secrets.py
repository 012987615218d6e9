"""`Secret`: a credential that never shows itself and scrubs itself from text."""

from __future__ import annotations

from heron.safety.secrets import Secret


def test_a_secret_hides_its_value_and_scrubs_it_from_text() -> None:
    secret = Secret("hunter2-but-longer")
    assert "hunter2" not in repr(secret) and "hunter2" not in str(secret)
    assert secret.scrub("bad key hunter2-but-longer given") == "bad key [REDACTED] given"
    assert secret.reveal() == "hunter2-but-longer"


def test_a_secret_also_masks_other_credentials_in_the_text() -> None:
    secret = Secret("hunter2-but-longer")
    scrubbed = secret.scrub("hunter2-but-longer and Bearer abcdefghijklmnop")
    assert "hunter2" not in scrubbed and "abcdefghijklmnop" not in scrubbed
