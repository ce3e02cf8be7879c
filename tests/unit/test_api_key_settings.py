"""API key settings: the two forms, the roles, and refusal that never echoes a key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings, SettingsError, load_settings
from app.settings.api_keys import ApiKey

KEY = "s3cr3t-0123456789abcdef"
OTHER = "an0ther-key-0123456789"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees only the variables it sets itself."""
    for name in list(os.environ):
        if name.upper().startswith("CHRONOQ_") or name.upper() in ("DATABASE_URL", "AMQP_URL"):
            monkeypatch.delenv(name)


def test_no_keys_and_no_unauthenticated_serving_by_default() -> None:
    settings = load_settings()

    assert settings.api_key_entries() == ()
    assert settings.allow_unauthenticated is False


def test_keys_are_read_from_the_environment_with_their_roles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHRONOQ_API_KEYS", f"deploy-bot:{KEY}, dash.board_1:{OTHER}:read")

    assert load_settings().api_key_entries() == (
        ApiKey("deploy-bot", KEY, read_only=False),
        ApiKey("dash.board_1", OTHER, read_only=True),
    )


def test_an_empty_variable_means_no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOQ_API_KEYS", "")
    monkeypatch.setenv("CHRONOQ_API_KEYS_FILE", "")

    assert load_settings().api_key_entries() == ()


def test_the_keys_file_has_one_entry_a_line_with_blanks_and_comments_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# who may call\n\n  ci:{KEY}  \n# reader\nviewer:{OTHER}:read\n")
    monkeypatch.setenv("CHRONOQ_API_KEYS_FILE", str(path))

    assert load_settings().api_key_entries() == (
        ApiKey("ci", KEY),
        ApiKey("viewer", OTHER, read_only=True),
    )


def test_both_forms_add_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"viewer:{OTHER}:read\n")
    monkeypatch.setenv("CHRONOQ_API_KEYS", f"ci:{KEY}")
    monkeypatch.setenv("CHRONOQ_API_KEYS_FILE", str(path))

    assert [k.name for k in load_settings().api_key_entries()] == ["ci", "viewer"]


def test_allow_unauthenticated_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHRONOQ_ALLOW_UNAUTHENTICATED", "true")

    assert load_settings().allow_unauthenticated is True


@pytest.mark.parametrize(
    "entry",
    [
        KEY,  # no name
        f":{KEY}",  # empty name
        f"a b:{KEY}",  # space in the name
        f"{'n' * 65}:{KEY}",  # name too long
        f"ci:{KEY}:write",  # unknown role
        f"ci:{KEY}:read:x",
        "ci:short-key-123",  # 15 characters
        f"ci:{KEY[:8]} {KEY[8:]}",  # whitespace inside
        f"ci:{KEY}\u00e9",  # not printable ASCII
        f"{KEY}:ci",  # the two swapped: the "name" is the key
    ],
)
def test_a_malformed_entry_is_refused_naming_the_variable_but_never_the_key(
    monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    monkeypatch.setenv("CHRONOQ_API_KEYS", f"ok:{OTHER},{entry}")

    with pytest.raises(SettingsError, match="CHRONOQ_API_KEYS entry 2") as caught:
        load_settings()

    message = str(caught.value)
    assert "\n" not in message
    for secret in (KEY, KEY[:8], KEY[8:], OTHER, "short-key-123"):
        assert secret not in message


def test_a_malformed_line_of_the_file_is_refused_by_its_number(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# keys\nci:{KEY}\nviewer {OTHER}\n")
    monkeypatch.setenv("CHRONOQ_API_KEYS_FILE", str(path))

    with pytest.raises(SettingsError, match="CHRONOQ_API_KEYS_FILE line 3") as caught:
        load_settings()

    assert OTHER not in str(caught.value)
    assert KEY not in str(caught.value)


def test_an_unreadable_keys_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CHRONOQ_API_KEYS_FILE", str(tmp_path / "missing"))

    with pytest.raises(SettingsError, match="CHRONOQ_API_KEYS_FILE"):
        load_settings()


def test_a_name_given_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOQ_API_KEYS", f"ci:{KEY},ci:{OTHER}")

    with pytest.raises(SettingsError, match="'ci'") as caught:
        load_settings()

    assert KEY not in str(caught.value)


def test_a_settings_error_built_directly_does_not_echo_the_key_either() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(api_keys=f"ci:{KEY}:admin")

    assert KEY not in str(caught.value)


def test_keys_are_absent_from_the_settings_repr() -> None:
    settings = load_settings(api_keys=f"ci:{KEY}")

    assert KEY not in repr(settings)
    assert KEY not in repr(settings.api_key_entries())
    assert KEY not in str(settings.model_dump())
