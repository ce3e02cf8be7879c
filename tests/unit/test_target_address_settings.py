"""CHRONOQ_TARGET_DENY and CHRONOQ_TARGET_ALLOW: parsed at start, refused naming the variable."""

from __future__ import annotations

import os
from ipaddress import ip_network

import pytest

from app.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("CHRONOQ_TARGET_"):
            monkeypatch.delenv(name)


def test_no_lists_by_default() -> None:
    assert load_settings().target_rules() == ((), None, ())


def test_the_deny_list_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOQ_TARGET_DENY", "10.0.0.0/8, 127.0.0.0/8,fd00::/8")

    deny, allow, names = load_settings().target_rules()

    assert deny == (ip_network("10.0.0.0/8"), ip_network("127.0.0.0/8"), ip_network("fd00::/8"))
    assert allow is None
    assert names == ()


def test_the_allow_list_holds_cidrs_and_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOQ_TARGET_ALLOW", "10.20.0.0/16,Hooks.Example.com.,*.svc.local")

    _, allow, names = load_settings().target_rules()

    assert allow == (ip_network("10.20.0.0/16"),)
    assert names == ("hooks.example.com", "*.svc.local")


def test_an_empty_allow_list_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOQ_TARGET_ALLOW", "")

    assert load_settings().target_rules()[1] is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CHRONOQ_TARGET_DENY", "10.0.0.0/33"),
        ("CHRONOQ_TARGET_DENY", "10.0.0.1/8"),
        ("CHRONOQ_TARGET_DENY", "hooks.example.com"),
        ("CHRONOQ_TARGET_ALLOW", "10.0.0.300"),
        ("CHRONOQ_TARGET_ALLOW", "not a name"),
        ("CHRONOQ_TARGET_ALLOW", ","),
    ],
)
def test_a_bad_entry_refuses_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(SettingsError, match=variable):
        load_settings()
