from __future__ import annotations

from typing import Any

import pytest

import heron.safety.secrets as secrets_module
from heron._support.canonical import canonical_json
from heron.safety.redact import (
    REDACTED,
    is_secret_key,
    sanitize_replacement,
    scrub_encoded,
    scrub_text,
    scrub_value,
    summarize_args,
)

# --- scrub_text: keyed values ------------------------------------------------------------------


def test_api_key_assignment_is_masked_keeping_four_characters() -> None:
    out = scrub_text('config: api_key = "sk-live-abcd1234efgh5678"')
    assert out == 'config: api_key = "sk-l*[REDACTED]"'
    assert "abcd1234efgh5678" not in out


def test_base64_token_value_is_masked_and_following_text_kept() -> None:
    text = "token=QWxh+GRpbjpvcGVu/IHNlc2FtZQ== next=public"
    assert scrub_text(text) == "token=QWxh*[REDACTED] next=public"


def test_double_quoted_secret_keeps_its_quotes() -> None:
    assert scrub_text('secret="QWxhZGRpbjpvcGVuIHNlc2FtZQ=="') == 'secret="QWxh*[REDACTED]"'


def test_single_quoted_password_is_masked() -> None:
    assert scrub_text("password='correct horse battery'") == "password='corr*[REDACTED]'"


def test_json_key_value_pairs_are_masked() -> None:
    text = '{"client_secret": "s3cr3t-value-123", "user": "alice"}'
    assert scrub_text(text) == '{"client_secret": "s3cr*[REDACTED]", "user": "alice"}'


def test_escaped_quote_does_not_end_a_quoted_value_early() -> None:
    out = scrub_text(r'{"password": "ab\"cdefghijklmnop"}')
    assert "cdefghijklmnop" not in out
    assert out.endswith('*[REDACTED]"}')


def test_quoted_value_cut_off_by_truncation_is_still_masked() -> None:
    out = scrub_text('"api_key": "sk-abcdefgh12345678... [truncated')
    assert "efgh12345678" not in out


def test_values_shorter_than_eight_characters_are_left_alone() -> None:
    for text in ("password: hunter2", "token=abc", 'secret="1234567"', "api_key: short"):
        assert scrub_text(text) == text


def test_key_matching_is_case_insensitive_and_keeps_original_case_of_prefix() -> None:
    assert scrub_text("PASSWORD=HunterHunter2") == "PASSWORD=Hunt*[REDACTED]"
    assert scrub_text("X-Api-Key: ABCDefghIJKL") == "X-Api-Key: ABCD*[REDACTED]"


def test_key_may_be_the_tail_of_a_longer_identifier() -> None:
    assert scrub_text("oauth_token: ya29.abcdefghijkl") == "oauth_token: ya29*[REDACTED]"


def test_cookie_and_set_cookie_headers_are_masked() -> None:
    assert scrub_text("Cookie: sid=abcdefgh1234") == "Cookie: sid=*[REDACTED]"
    assert scrub_text("Set-Cookie: s3ss10nvalue99; Path=/") == "Set-Cookie: s3ss*[REDACTED]; Path=/"


def test_authorization_header_with_basic_scheme_masks_the_credential() -> None:
    out = scrub_text("Authorization: Basic dXNlcjpwYXNzd29yZA==")
    assert out == "Authorization: Basic dXNl*[REDACTED]"


def test_words_that_merely_contain_a_key_are_not_masked() -> None:
    text = "max_tokens=100000000 and tokens: 12345678 are counts, not secrets"
    assert scrub_text(text) == text


# --- scrub_text: free-standing token shapes ----------------------------------------------------


def test_bearer_token_is_masked_wherever_it_appears() -> None:
    out = scrub_text('curl -H "Authorization: BEARER eyJhbGciOiJIUzI1NiJ9.e30.sig" x')
    assert out == 'curl -H "Authorization: BEARER eyJh*[REDACTED]" x'
    assert scrub_text("use Bearer abcdefghijkl") == "use Bearer abcd*[REDACTED]"


def test_bearer_inside_a_longer_word_is_not_an_auth_scheme() -> None:
    text = "the forbearer abcdefghijkl"
    assert scrub_text(text) == text


@pytest.mark.parametrize(
    "token",
    [
        "sk-live-abcd1234efgh5678",
        "sk-ant-api03-abcdefghijklmnop1234",
        "sk_live_abcdefghijklmnop1234",
        "ghp_" + "a1B2" * 9,
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "xoxb-1234567890-abcdefghij",
        "xoxp-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "AIza" + "b" * 35,
    ],
)
def test_well_known_token_shapes_are_masked_in_prose(token: str) -> None:
    out = scrub_text(f"found {token} in the log")
    assert out == f"found {token[:4]}*[REDACTED] in the log"


def test_token_shapes_inside_longer_words_are_left_alone() -> None:
    text = "ask-live-abcd1234efgh5678 and xAKIAIOSFODNN7EXAMPLE"
    assert scrub_text(text) == text


def test_sk_prefixed_prose_without_digits_is_left_alone() -> None:
    text = "models from sk-learn-compatible-estimators"
    assert scrub_text(text) == text


def test_pem_private_key_body_is_replaced_whole() -> None:
    pem = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nQ2hhbmdlIG1l\n"
        "-----END RSA PRIVATE KEY-----"
    )
    out = scrub_text(f"key:\n{pem}\nafter")
    assert out == (
        "key:\n-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----\nafter"
    )


def test_truncated_pem_block_is_masked_to_the_end_of_the_text() -> None:
    out = scrub_text("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    assert out == "-----BEGIN PRIVATE KEY-----[REDACTED]"


def test_pem_under_a_private_key_field_leaks_no_body() -> None:
    text = '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n-----END PRIVATE KEY-----"'
    assert "MIIEvQIBADAN" not in scrub_text(text)


def test_plain_text_is_returned_unchanged() -> None:
    text = "ls -la /usr/lib\nexit code 0, 12 files, path=/tmp/work"
    assert scrub_text(text) == text
    assert scrub_text("") == ""


@pytest.mark.parametrize(
    "text",
    [
        'api_key = "sk-live-abcd1234efgh5678"',
        "token=QWxh+GRpbjpvcGVu/IHNlc2FtZQ== next=public",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc",
        "authorization=Bearer eyJhbGciOiJIUzI1NiJ9.abc",
        '{"authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.abc"}',
        "token=sk-live-abcd1234efgh5678 and ghp_" + "x" * 36,
        "{token=abcdefghijkl}",
        "password=token=abcdefghijkl",
        "private_key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\n-----END PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----\nabc",
        r'{"password": "abc\"defghijklmn"}',
    ],
)
def test_scrubbing_is_idempotent(text: str) -> None:
    once = scrub_text(text)
    assert once != text
    assert scrub_text(once) == once


# --- is_secret_key / scrub_value ---------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "oauth_token",
        "client_secret",
        "password",
        "private_key",
        "bearer_token",
        "X-API-Key",
        "DBPassword",
        "AuthHeader",
        "Set-Cookie",
        "session_id",
        "aws-access-key-id",
        "credentials",
    ],
)
def test_secret_key_names_are_recognised(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["path", "command", "query", "limit", "user", "url"])
def test_ordinary_key_names_are_not_secret(key: str) -> None:
    assert not is_secret_key(key)


def test_scrub_value_redacts_whole_values_under_secret_keys_at_any_depth() -> None:
    value = {
        "user": "alice",
        "headers": {"Authorization": "Basic abc", "Accept": "text/plain"},
        "items": [{"password": 1234}, {"note": "token=QWxh+GRpbjpvcGVu"}],
        "pair": ("x", {"api_key": ["a", "b"]}),
        "count": 3,
        "flag": None,
    }
    assert scrub_value(value) == {
        "user": "alice",
        "headers": {"Authorization": REDACTED, "Accept": "text/plain"},
        "items": [{"password": REDACTED}, {"note": "token=QWxh*[REDACTED]"}],
        "pair": ("x", {"api_key": REDACTED}),
        "count": 3,
        "flag": None,
    }


def test_scrub_value_never_modifies_its_input() -> None:
    value = {"secret": "abc", "nested": {"token": "x"}, "list": ["password=abcdefghij"]}
    scrub_value(value)
    assert value == {"secret": "abc", "nested": {"token": "x"}, "list": ["password=abcdefghij"]}


def test_scrub_value_scrubs_a_bare_string() -> None:
    assert scrub_value("token=abcdefghij") == "token=abcd*[REDACTED]"


# --- summarize_args ----------------------------------------------------------------------------


def test_summary_redacts_values_of_secret_argument_names() -> None:
    secrets = {
        "api_key": "value-api-key-1",
        "oauth_token": "value-oauth-2",
        "client_secret": "value-client-3",
        "password": "pw4",
        "private_key": "value-private-5",
        "bearer_token": "value-bearer-6",
        "X-API-Key": "value-xapi-7",
        "DBPassword": "pw8",
        "AuthHeader": "value-auth-9",
    }
    summary = summarize_args({"url": "https://example.com", **secrets})
    for name, secret in secrets.items():
        assert f"{name}: [redacted]" in summary
        assert secret not in summary
    assert summary.startswith("url: https://example.com, ")


def test_summary_puts_path_first_then_keeps_argument_order() -> None:
    summary = summarize_args({"mode": "w", "content": "hello", "path": "/tmp/notes.txt"})
    assert summary == "path: /tmp/notes.txt, mode: w, content: hello"


def test_summary_truncates_long_values_with_an_ellipsis() -> None:
    summary = summarize_args({"content": "x" * 200, "n": list(range(100))})
    content, numbers = summary.split(", n: ")
    assert content == "content: " + "x" * 80 + "…"
    assert len(numbers) == 81
    assert numbers.endswith("…")


def test_summary_respects_a_custom_value_limit() -> None:
    assert summarize_args({"q": "abcdefghij"}, max_value_chars=4) == "q: abcd…"
    assert summarize_args({"q": "abcd"}, max_value_chars=4) == "q: abcd"


def test_summary_scrubs_credentials_inside_ordinary_values() -> None:
    summary = summarize_args({"command": "curl -H 'Authorization: Bearer abcdefghijklmnop' x"})
    assert "efghijklmnop" not in summary
    assert "abcd*[REDACTED]" in summary


def test_summary_renders_non_strings_as_compact_json_with_nested_secrets_redacted() -> None:
    summary = summarize_args({"opts": {"retries": 2, "token": "abc"}, "dry_run": True, "x": None})
    assert summary == 'opts: {"retries":2,"token":"[REDACTED]"}, dry_run: true, x: null'


def test_summary_shows_control_and_bidi_characters_escaped() -> None:
    summary = summarize_args({"command": "echo hi\n\x1b[2Krm -rf /\u202e"})
    assert summary == "command: echo hi\\n\\x1b[2Krm -rf /\\u202e"
    assert "\x1b" not in summary
    assert "\n" not in summary


def test_summary_of_no_arguments_is_empty() -> None:
    assert summarize_args({}) == ""


# --- sanitize_replacement ----------------------------------------------------------------------


def test_replacement_drops_control_characters_but_keeps_whitespace() -> None:
    assert sanitize_replacement("ok\x07line\nnext\ttab\x1b[31m") == "okline\nnext\ttab[31m"
    assert sanitize_replacement("a\r\nb\x00c\x7fd\x85e") == "a\r\nbcde"


def test_replacement_is_capped_in_bytes_on_a_character_boundary() -> None:
    text = "é" * 40_000  # 80 000 bytes of 2-byte characters
    out = sanitize_replacement(text)
    encoded = out.encode("utf-8")
    assert len(encoded) == 65_536
    assert out == "é" * 32_768


def test_replacement_cap_never_splits_a_multibyte_character() -> None:
    out = sanitize_replacement("a" + "€" * 10, max_bytes=8)  # 1 + 3 + 3 bytes fit, next does not
    assert out == "a€€"
    assert len(out.encode("utf-8")) == 7


def test_replacement_within_the_cap_is_unchanged() -> None:
    text = "plain result\nwith two lines"
    assert sanitize_replacement(text) == text
    assert sanitize_replacement("abc", max_bytes=3) == "abc"


def test_replacement_rejects_a_negative_cap() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        sanitize_replacement("x", max_bytes=-1)


# --- scrub_encoded: the scan of a value's JSON stands for the walk ------------------------------

QUOTED_SECRET = 'ab"c\\d\nefgh-1'
"""A known secret JSON escapes three ways: only its escaped form is in the JSON text."""


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [True, None, 2.5], "c": {"d": "plain text é"}},
        {"nested": {"deeper": [{"X-Api-Key": 3}]}},
        {"DBPassword": "short"},
        {"auth": "x"},
        {"Session-Id": 7, "user": "alice"},
        {"TO\u212aEN": "a Kelvin sign lowercases to k"},
        {"list": ["see sk-abcdef0123456789abcdef"]},
        {"h": "Authorization: Bearer abcdefgh12345678"},
        {"pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"},
        {"text": "Token: QWxhZGRpbjpvcGVuIHNlc2FtZQ=="},
        {"q": f"say {QUOTED_SECRET} twice"},
        {QUOTED_SECRET: "as a key"},
    ],
)
def test_scrub_encoded_agrees_with_scrub_value(
    value: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        secrets_module, "_registry", secrets_module.KnownSecrets({"QUOTED": QUOTED_SECRET})
    )
    assert scrub_encoded(value, canonical_json(value)) == scrub_value(value)


def test_scrub_encoded_returns_a_clean_value_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        secrets_module, "_registry", secrets_module.KnownSecrets({"QUOTED": QUOTED_SECRET})
    )
    value = {"a": 1, "path": "notes/today.md", "items": ["ab", "c\\d"]}
    assert scrub_encoded(value, canonical_json(value)) is value
    masked = {"x": f"..{QUOTED_SECRET}.."}
    assert scrub_encoded(masked, canonical_json(masked)) == {"x": "..«secret:QUOTED».."}
