"""Running the real `chronoq` command, and reading back what a PostgreSQL schema holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

# Variables the command reads; a test passes the ones it means, the rest are removed.
OWN_VARIABLES = ("DATABASE_URL", "AMQP_URL")


def command() -> list[str]:
    script = Path(sys.executable).with_name("chronoq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def environment(**variables: str) -> dict[str, str]:
    clean = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith("CHRONOQ_") and name.upper() not in OWN_VARIABLES
    }
    return {**clean, **variables}


def chronoq(*args: str, timeout: float = 120, **variables: str) -> subprocess.CompletedProcess[str]:
    """Run `chronoq args...` with only `variables` of its own environment set."""
    return subprocess.run(
        [*command(), *args],
        env=environment(**variables),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(*args: str, **variables: str) -> subprocess.Popen[str]:
    """Start `chronoq args...` without waiting for it."""
    return subprocess.Popen(
        [*command(), *args],
        env=environment(**variables),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def run_script(url: str, script: str) -> None:
    """Run a multi-statement SQL script the way psql -f would, on a plain connection."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(script)
    finally:
        await connection.close()


async def describe(url: str, schema: str) -> dict[str, set[tuple[Any, ...]]]:
    """The tables, columns, indexes and constraints of `schema`, by name and definition."""
    connection = await asyncpg.connect(url)
    try:
        tables = await connection.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema
        )
        columns = await connection.fetch(
            """
            SELECT table_name, column_name, data_type, character_maximum_length,
                   is_nullable, column_default
            FROM information_schema.columns WHERE table_schema = $1
            """,
            schema,
        )
        indexes = await connection.fetch(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = $1",
            schema,
        )
        constraints = await connection.fetch(
            """
            SELECT t.relname, c.conname, c.contype, pg_get_constraintdef(c.oid)
            FROM pg_constraint AS c
            JOIN pg_class AS t ON t.oid = c.conrelid
            JOIN pg_namespace AS n ON n.oid = c.connamespace
            WHERE n.nspname = $1
            """,
            schema,
        )
    finally:
        await connection.close()
    return {
        "tables": {tuple(row) for row in tables},
        "columns": {tuple(row) for row in columns},
        "indexes": {tuple(row) for row in indexes},
        "constraints": {tuple(row) for row in constraints},
    }


def differences(built: dict[str, set[Any]], expected: dict[str, set[Any]]) -> list[str]:
    """What `built` lacks or has beyond `expected`, part by part (empty: the same)."""
    found = []
    for part in expected:
        missing = sorted(expected[part] - built[part], key=str)
        extra = sorted(built[part] - expected[part], key=str)
        if missing:
            found.append(f"{part} missing: {missing}")
        if extra:
            found.append(f"{part} extra: {extra}")
    return found
