"""The wheel, installed into a fresh virtualenv, is the whole service from any directory: it
carries every file of app/, of chronoq/ (the client's public name, `chronoq.client`) and the
migrations (alembic/, as app.migrations), `chronoq migrate` and `chronoq serve` work on
SQLite and PostgreSQL with no file of the checkout, and `chronoq --version` is the
package's version.

The wheel is built once per module from a copy of the tracked files (a build writes build/
and *.egg-info beside its sources), with the build tools of this environment and no network;
the fresh virtualenv imports the dependencies from this one's site-packages (a .pth line) but
nothing of the checkout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.store.engine.migrations import head_revisions
from tests.e2e.processes import Services, service_environment

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def run(
    argv: list[str], cwd: Path, settings: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = service_environment(settings or {})
    env.pop("PYTHONPATH", None)  # nothing of the checkout but what the wheel installed
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    # A file deleted in the work tree but not yet in the index is not built.
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    build = run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), "."],
        cwd=source,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (built,) = dist.glob("*.whl")
    return built


@dataclass(frozen=True)
class Installation:
    venv: Path
    elsewhere: Path  # a working directory outside the checkout, with nothing in it

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def chronoq(self) -> Path:
        return self.venv / "bin" / "chronoq"

    def run(
        self, *args: str, settings: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run([str(self.chronoq), *args], self.elsewhere, settings)


@pytest.fixture(scope="module")
def installation(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installation:
    venv = tmp_path_factory.mktemp("venv")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    created = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], elsewhere)
    assert created.returncode == 0, created.stderr
    # This environment's pip installs into the new one; no index, so no network.
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    install = run(
        [*pip, "install", "--no-deps", "--no-index", "--disable-pip-version-check", str(wheel)],
        elsewhere,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # The dependencies come from this environment's site-packages, listed after the new one's
    # own. The .pth files in it are not read from there, so its editable install of the
    # checkout is not seen.
    found = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        elsewhere,
    )
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (Path(found.stdout.strip()) / "dependencies.pth").write_text("\n".join(ours) + "\n")
    return Installation(venv, elsewhere)


def test_the_wheel_carries_every_file_of_app_and_the_migrations(wheel: Path) -> None:
    shipped = set(zipfile.ZipFile(wheel).namelist())
    tracked = tracked_files()
    code = {name for name in tracked if name.startswith(("app/", "chronoq/"))}
    migrations = {
        "app/migrations/" + name.removeprefix("alembic/")
        for name in tracked
        if name.startswith("alembic/")
    }
    assert {"app/migrations/env.py", "app/migrations/script.py.mako"} <= migrations
    assert code | migrations <= shipped, sorted((code | migrations) - shipped)
    assert not any(name.startswith("alembic/") for name in shipped), "app.migrations, not alembic"


def test_the_installed_command_is_the_wheels_own(installation: Installation) -> None:
    version = installation.run("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"chronoq {VERSION}"

    # The client by the name integrations use, beside the service's own modules.
    probe = (
        "import json, sys, app, app.main, app.cli.command, chronoq.client; "
        "from chronoq.client import Client, ValidationError; "
        "from app.client import Client as Same; assert Client is Same; "
        "print(json.dumps([[app.__file__, chronoq.client.__file__], "
        "[getattr(m, '__file__', None) or '' for m in list(sys.modules.values())]]))"
    )
    imported = run([str(installation.python), "-c", probe], installation.elsewhere)
    assert imported.returncode == 0, imported.stderr
    packages, files = json.loads(imported.stdout)
    for package in packages:
        assert Path(package).is_relative_to(installation.venv), package
    checkout = [ROOT / "app", ROOT / "chronoq", ROOT / "alembic"]
    assert not [name for name in files if any(Path(name).is_relative_to(c) for c in checkout)]

    # The DDL of `chronoq schema` is stamped with the head revision of the shipped migrations.
    ddl = installation.run("schema", "--dialect", "sqlite")
    assert ddl.returncode == 0, ddl.stderr
    (head,) = head_revisions()
    assert f"INSERT INTO alembic_version (version_num) VALUES ('{head}');" in ddl.stdout


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no tables yet: the installed command migrates it."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'chronoq.db'}"
    make: Callable[[], str] = request.getfixturevalue("empty_postgres")
    return make()


async def test_the_installed_wheel_migrates_and_serves(
    installation: Installation, empty_database: str, services: Services
) -> None:
    # The service does not migrate at start: `chronoq migrate` did, or it would not be ready.
    settings = {"DATABASE_URL": empty_database, "CHRONOQ_AUTO_MIGRATE": "false"}
    if not empty_database.startswith("sqlite"):
        sql = installation.run("migrate", "--sql", settings=settings)
        assert sql.returncode == 0, sql.stderr
        assert "CREATE TABLE schedules" in sql.stdout
        assert "INSERT INTO alembic_version" in sql.stdout
    migrate = installation.run("migrate", settings=settings)
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr

    service = await services.start(
        "wheel", settings, program=installation.chronoq, cwd=installation.elsewhere
    )
    await service.wait_ready(30)
    trigger = {"type": "cron", "expression": "@daily"}
    body = {
        "event_type": "wheel.check",
        "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
        "trigger": trigger,
    }
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        created = await client.post("/v1/schedules", json=body)
        assert created.status_code == 201, created.text
        read = await client.get(f"/v1/schedules/{created.json()['id']}")
    assert read.status_code == 200, read.text
    assert read.json()["event_type"] == "wheel.check"
    assert trigger.items() <= read.json()["trigger"].items()
