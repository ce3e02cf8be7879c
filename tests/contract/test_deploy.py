"""docker-compose.yml (and docker-compose.rabbitmq.yml over it), the Dockerfile, the `docker run`
quick starts and deploy/nginx*.conf agree with each other and with the service: what one file
names, another provides. Docker itself is not needed."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from app.settings import DEFAULT_DATABASE_URL, Settings, known_variables
from tests.conftest import service_missing
from tests.nginx import find_nginx, render_nginx_conf

ROOT = Path(__file__).resolve().parents[2]
REPLICA = re.compile(r"chronoq-\d+")


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def rabbitmq_compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.rabbitmq.yml").read_text())
    return document


def merged(base: Any, extra: Any) -> Any:
    """`extra` over `base` as compose merges a later file into an earlier one: mappings key by
    key (a service's environment and depends_on included), anything else replaced."""
    if isinstance(base, dict) and isinstance(extra, dict):
        return {
            key: merged(base[key], extra[key])
            if key in base and key in extra
            else extra.get(key, base.get(key))
            for key in {**base, **extra}
        }
    return extra


def services_with_rabbitmq() -> dict[str, dict[str, Any]]:
    """The services of `docker compose -f docker-compose.yml -f docker-compose.rabbitmq.yml`."""
    found: dict[str, dict[str, Any]] = merged(services(), rabbitmq_compose()["services"])
    return found


def replicas() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if REPLICA.fullmatch(name)}


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """Dependency -> condition; the short list form means `service_started`."""
    value = service.get("depends_on", {})
    if isinstance(value, list):
        return dict.fromkeys(value, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in value.items()}


def environment(service: dict[str, Any]) -> dict[str, str]:
    value = service.get("environment", {})
    if isinstance(value, list):
        return dict(item.partition("=")[::2] for item in value)
    return {key: str(text) for key, text in value.items()}


def command(value: str | list[str]) -> list[str]:
    return shlex.split(value) if isinstance(value, str) else list(value)


def published_container_ports(service: dict[str, Any]) -> dict[int, str]:
    """Container port -> the host side it is published on (`ip:port` or `port`)."""
    found: dict[int, str] = {}
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            found[int(entry["target"])] = f"{entry.get('host_ip', '')}:{entry['published']}"
        else:
            host, _, container = str(entry).rpartition(":")
            found[int(container.split("/")[0])] = host
    return found


def seconds(duration: str | int | float) -> float:
    """A compose duration such as `30s`, `1m30s` or `1500ms`."""
    if isinstance(duration, int | float):
        return float(duration)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", duration)
    assert parts, f"duration {duration!r}"
    assert "".join(n + u for n, u in parts) == duration, f"duration {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, arguments) of each build stage, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    instructions = [
        (keyword.upper(), rest.strip())
        for keyword, _, rest in (line.strip().partition(" ") for line in joined.splitlines())
        if keyword
    ]
    starts = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    assert len(starts) >= 2, "the Dockerfile builds in one stage and runs in another"
    ends = [*starts[1:], len(instructions)]
    return [instructions[a:b] for a, b in zip(starts, ends, strict=True)]


def dockerfile_final_stage() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the last build stage, continuation lines joined."""
    return dockerfile_stages()[-1]


def stage_commands(stage: list[tuple[str, str]]) -> list[list[str]]:
    """The commands of a stage's RUN instructions (shell form), split at `&&`."""
    found: list[list[str]] = []
    for keyword, rest in stage:
        if keyword == "RUN":
            found.extend(shlex.split(part) for part in rest.split("&&"))
    return found


def pip_installs(stage: list[tuple[str, str]]) -> list[list[str]]:
    return [argv for argv in stage_commands(stage) if argv[:2] == ["pip", "install"]]


def instruction(name: str) -> str:
    found = [rest for keyword, rest in dockerfile_final_stage() if keyword == name]
    assert found, f"the final stage of the Dockerfile has no {name}"
    return found[-1]  # the last one is the one that counts


def exposed_port() -> int:
    return int(instruction("EXPOSE").split()[0].split("/")[0])


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form CMD (shell form would put /bin/sh in front of the
    server, and SIGTERM would stop the shell instead of uvicorn)."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        pytest.fail(f"not exec form: {arguments}")
    assert isinstance(parsed, list), arguments
    assert all(isinstance(part, str) for part in parsed), arguments
    return parsed


def option(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} missing from {argv}"
    return argv[argv.index(name) + 1]


def nginx_conf() -> str:
    """deploy/nginx.conf without its comments."""
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    return re.sub(r"#[^\n]*", "", text)


def upstream_block(conf: str) -> tuple[str, str]:
    blocks = re.findall(r"\bupstream\s+(\S+)\s*\{([^}]*)\}", conf)
    assert len(blocks) == 1, "deploy/nginx.conf has one upstream"
    name, body = blocks[0]
    return name, body


def test_postgres_and_rabbitmq_have_healthchecks() -> None:
    for name in ("postgres", "rabbitmq"):
        check = services_with_rabbitmq()[name].get("healthcheck", {})
        assert check.get("test"), f"{name} has no healthcheck, so nothing can wait for it"
        assert not check.get("disable"), name


def test_migrate_runs_once_when_postgres_is_healthy() -> None:
    migrate = services()["migrate"]
    assert command(migrate["command"]) == ["chronoq", "migrate"]
    assert depends_on(migrate).get("postgres") == "service_healthy"
    assert migrate.get("restart", "no") == "no", "a one-shot service is not restarted"


def test_replicas_start_after_the_migration() -> None:
    fleet = replicas()
    assert len(fleet) >= 2, "several replicas, so that the balancer has somewhere to go"
    migrate = services()["migrate"]
    dispatch_timeout = Settings.model_fields["dispatch_timeout"].default
    for name, replica in fleet.items():
        needs = depends_on(replica)
        assert needs.get("migrate") == "service_completed_successfully", name
        env = environment(replica)
        assert env.get("CHRONOQ_AUTO_MIGRATE") == "false", f"{name}: migrate migrates, once"
        assert env.get("DATABASE_URL") == environment(migrate)["DATABASE_URL"], name
        assert (replica.get("image"), replica.get("build")) == (
            migrate.get("image"),
            migrate.get("build"),
        ), f"{name} runs the image that migrate runs"
        assert not replica.get("ports"), f"{name}: traffic goes through nginx"
        # SIGTERM lets deliveries in flight finish within the dispatch timeout.
        grace = seconds(replica.get("stop_grace_period", "10s"))
        assert grace > dispatch_timeout, f"{name}: stop_grace_period {grace:g}s"


def test_the_webhook_installation_runs_no_broker() -> None:
    """docker-compose.yml alone: nothing of RabbitMQ, neither a service, a dependency, an
    AMQP_URL nor a variable the host must set for it."""
    assert "rabbitmq" not in services()
    for name, service in services().items():
        assert "rabbitmq" not in depends_on(service), name
        assert "AMQP_URL" not in environment(service), name
    assert "rabbitmq-data" not in (compose().get("volumes") or {})
    text = re.sub(r"#[^\n]*", "", (ROOT / "docker-compose.yml").read_text())
    assert "RABBITMQ" not in text
    assert "rabbitmq" not in text


def test_the_rabbitmq_file_adds_the_broker_and_connects_every_replica_to_it() -> None:
    added = rabbitmq_compose()["services"]
    assert set(added) == {"rabbitmq", *replicas()}, "the broker, and nothing but the replicas"
    for name, replica in services_with_rabbitmq().items():
        if not REPLICA.fullmatch(name):
            continue
        assert set(added[name]) == {"environment", "depends_on"}, name
        needs = depends_on(replica)
        assert needs.get("rabbitmq") == "service_healthy", name
        assert needs.get("migrate") == "service_completed_successfully", name
        env = environment(replica)
        assert "@rabbitmq:5672/" in env.get("AMQP_URL", ""), f"{name}: AMQP_URL to the broker"
        # The rest of the replica is docker-compose.yml's.
        assert (
            env.get("CHRONOQ_API_KEYS_FILE")
            == environment(replicas()[name])["CHRONOQ_API_KEYS_FILE"]
        )
    volumes = [str(v).split(":")[0] for v in added["rabbitmq"].get("volumes", [])]
    assert set(volumes) <= set(rabbitmq_compose().get("volumes") or {})


def test_every_variable_the_services_set_is_a_setting() -> None:
    known = known_variables()
    assert {"DATABASE_URL", "AMQP_URL", "CHRONOQ_LEASE"} <= known
    for found in (services(), services_with_rabbitmq()):
        for name in ["migrate", *replicas()]:
            unknown = set(environment(found[name])) - known
            assert not unknown, f"{name} sets {sorted(unknown)}, which the service does not read"


def test_nginx_publishes_8080_and_mounts_the_repository_config() -> None:
    nginx = services()["nginx"]
    assert published_container_ports(nginx) == {8080: "127.0.0.1:8080"}
    mounts = [str(v).split(":") for v in nginx.get("volumes", [])]
    assert ["./deploy/nginx.conf", "/etc/nginx/nginx.conf", "ro"] in mounts
    assert set(replicas()) <= set(depends_on(nginx)), "nginx starts after every replica"


def test_nginx_balances_over_exactly_the_replicas() -> None:
    conf = nginx_conf()
    name, body = upstream_block(conf)
    servers = re.findall(r"^\s*server\s+([^\s;]+)", body, re.MULTILINE)
    assert sorted(servers) == sorted(f"{r}:{exposed_port()}" for r in replicas())
    assert re.search(rf"\bproxy_pass\s+http://{re.escape(name)}\s*;", conf)
    listens = re.findall(r"\blisten\s+([^;\s]+)", conf)
    ports = [int(listen.rpartition(":")[2]) for listen in listens]
    assert ports == list(published_container_ports(services()["nginx"]))


def test_nginx_keeps_connections_to_the_replicas_alive() -> None:
    conf = nginx_conf()
    _, body = upstream_block(conf)
    assert re.search(r"\bkeepalive\s+\d+\s*;", body)
    assert re.search(r"\bproxy_http_version\s+1\.1\s*;", conf)
    assert re.search(r'\bproxy_set_header\s+Connection\s+""\s*;', conf)
    # nginx must close an idle connection before uvicorn does, or a request can be sent on a
    # connection the replica is closing.
    idle = re.search(r"\bkeepalive_timeout\s+(\d+)s\s*;", body)
    assert idle, "the upstream sets keepalive_timeout"
    uvicorn_idle = float(option(exec_form(instruction("CMD")), "--timeout-keep-alive"))
    assert float(idle.group(1)) < uvicorn_idle


def test_image_runs_chronoq_serve_as_a_user_in_exec_form_and_checks_healthz() -> None:
    user = instruction("USER").split(":")[0]
    assert user not in {"root", "0"}, "the image runs as a non-root user"
    argv = exec_form(instruction("CMD"))
    # `chronoq serve`, not uvicorn itself: it refuses a non-loopback address without keys.
    assert argv[:2] == ["chronoq", "serve"], argv
    assert int(option(argv, "--port")) == exposed_port()
    check = instruction("HEALTHCHECK")
    assert re.search(rf"127\.0\.0\.1:{exposed_port()}/healthz\b", check), check


def test_the_image_is_never_open_by_default() -> None:
    """It listens on 0.0.0.0: `chronoq serve` starts it only with keys, so nothing in the
    image may say unauthenticated serving is fine."""
    argv = exec_form(instruction("CMD"))
    assert option(argv, "--host") == "0.0.0.0"
    environment = " ".join(rest for keyword, rest in dockerfile_final_stage() if keyword == "ENV")
    assert "CHRONOQ_ALLOW_UNAUTHENTICATED" not in environment
    assert "CHRONOQ_API_KEYS" not in environment, "keys come from where the image runs"


def test_replicas_read_api_keys_from_a_secret_the_host_must_name() -> None:
    declared = compose().get("secrets", {})
    for name, replica in replicas().items():
        env = environment(replica)
        assert env.get("CHRONOQ_ALLOW_UNAUTHENTICATED", "false") == "false", name
        # Keys in a file, never in the environment `docker inspect` shows.
        assert "CHRONOQ_API_KEYS" not in env, name
        path = env.get("CHRONOQ_API_KEYS_FILE", "")
        secret = path.removeprefix("/run/secrets/")
        assert path.startswith("/run/secrets/"), name
        assert secret in replica.get("secrets", []), name
        # `${VAR:?message}`: compose stops with the message when the host names no file.
        source = str(declared.get(secret, {}).get("file", ""))
        assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", source), f"{secret}: {source!r}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("docker-compose.yml", {"POSTGRES_PASSWORD"}),
        ("docker-compose.rabbitmq.yml", {"RABBITMQ_PASSWORD"}),
    ],
)
def test_no_password_has_a_default(name: str, expected: set[str]) -> None:
    """Every variable the files read is required (`${VAR:?message}`): no installation runs
    on a password everyone who read these files knows."""
    text = re.sub(r"#[^\n]*", "", (ROOT / name).read_text())
    references = re.findall(r"\$\{([^}]*)\}", text)
    assert references
    for reference in references:
        assert re.fullmatch(r"[A-Z_]+:\?.+", reference), f"${{{reference}}} is not required"
    passwords = {r.split(":")[0] for r in references if "PASSWORD" in r}
    assert passwords == expected
    postgres = environment(services_with_rabbitmq()["postgres"])["POSTGRES_PASSWORD"]
    assert postgres.startswith("${POSTGRES_PASSWORD:?")
    assert environment(services_with_rabbitmq()["rabbitmq"])["RABBITMQ_DEFAULT_PASS"].startswith(
        "${RABBITMQ_PASSWORD:?"
    )


def test_replicas_are_healthy_once_ready_on_the_port_the_image_serves() -> None:
    for name, replica in replicas().items():
        check = replica.get("healthcheck", {})
        test = " ".join(command(check.get("test", [])))
        # Ready (database, broker, loop), not merely up: nginx waits for service_healthy.
        assert re.search(rf"127\.0\.0\.1:{exposed_port()}/readyz\b", test), f"{name}: {test}"
        assert "/healthz" not in test, name
        assert not check.get("disable"), name
        assert depends_on(services()["nginx"]).get(name) == "service_healthy", name


def test_nginx_looks_the_replica_names_up_again_while_it_runs() -> None:
    conf = nginx_conf()
    assert re.search(r"^\s*resolver\s+127\.0\.0\.11\b[^;]*;", conf, re.MULTILINE), "Docker's DNS"
    _, body = upstream_block(conf)
    assert re.search(r"\bzone\s+\S+\s+\d+[km]\s*;", body), "`resolve` needs a shared zone"
    servers = re.findall(r"^\s*server\s+([^;]+);", body, re.MULTILINE)
    assert servers
    for server in servers:
        assert "resolve" in server.split()[1:], server
    # Upstream `resolve` is in nginx 1.27.3 and later.
    image = str(services()["nginx"]["image"])
    version = tuple(int(part) for part in image.partition(":")[2].split("."))
    assert version >= (1, 27, 3) or (len(version) == 2 and version >= (1, 28)), image


def location(conf: str, match: str) -> str:
    found = re.findall(rf"\blocation\s+{re.escape(match)}\s*\{{([^}}]*)\}}", conf)
    assert found, f"no `location {match}`"
    body: str = found[-1]
    return body


def test_the_public_balancer_keeps_metrics_to_the_scraper() -> None:
    for conf in (nginx_conf(), nginx_tls_conf()):
        assert re.fullmatch(r"\s*deny\s+all;\s*", location(conf, "= /metrics"))


def nginx_tls_conf() -> str:
    return re.sub(r"#[^\n]*", "", (ROOT / "deploy" / "nginx-tls.conf").read_text())


def test_the_tls_example_proxies_as_the_plain_balancer_does() -> None:
    plain, tls = nginx_conf(), nginx_tls_conf()
    assert upstream_block(tls) == upstream_block(plain)
    # The HTTPS server proxies as the plain one does (it adds HSTS).
    lines = {line.strip() for line in location(plain, "/").splitlines() if line.strip()}
    assert lines <= {line.strip() for line in location(tls, "/").splitlines()}
    assert re.search(r"\blisten\s+8443\s+ssl\s*;", tls)
    assert re.search(r"\bssl_protocols\s+TLSv1\.2\s+TLSv1\.3\s*;", tls)
    assert re.search(r"\breturn\s+308\s+https://", tls), "plain HTTP redirects to HTTPS"


def test_the_balancers_pass_the_host_the_browser_used_port_included() -> None:
    # The console's changes are compared with the origin the request reached: a Host without
    # the browser's port ($host) makes every one of them another site's.
    for conf in (nginx_conf(), nginx_tls_conf()):
        mapped = re.search(r"\bmap\s+\$http_host\s+\$(\w+)\s*\{([^}]*)\}", conf)
        assert mapped, "the Host is mapped from $http_host"
        variable, cases = mapped.groups()
        assert re.search(r"\bdefault\s+\$http_host\s*;", cases)
        proxied = location(conf, "/")
        assert re.search(rf"\bproxy_set_header\s+Host\s+\${variable}\s*;", proxied)
        assert re.search(rf"\bproxy_set_header\s+X-Forwarded-Host\s+\${variable}\s*;", proxied)
        assert re.search(r"\bproxy_set_header\s+X-Forwarded-Proto\s+\$scheme\s*;", proxied)
        assert not re.search(r"\bproxy_set_header\s+Host\s+\$host\b", proxied)


def test_the_proxy_settings_are_settings() -> None:
    assert {"CHRONOQ_PUBLIC_ORIGIN", "CHRONOQ_FORWARDED_ALLOW_IPS"} <= known_variables()


def test_nginx_accepts_the_tls_example(tmp_path: Path) -> None:
    nginx = find_nginx()
    openssl = shutil.which("openssl")
    if openssl is None:
        service_missing("openssl", "no openssl on PATH, to make a throwaway certificate")
    assert openssl is not None
    crt, key = tmp_path / "chronoq.crt", tmp_path / "chronoq.key"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run(
        [openssl, *request, "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    text = (ROOT / "deploy" / "nginx-tls.conf").read_text()
    text = text.replace("/etc/nginx/certs/chronoq.crt", str(crt))
    text = text.replace("/etc/nginx/certs/chronoq.key", str(key))
    rendered = render_nginx_conf(text, listen=8080, upstreams=[8001, 8002], prefix=tmp_path)
    conf = tmp_path / "nginx-tls.conf"
    conf.write_text(rendered)
    checked = subprocess.run(
        [nginx, "-t", "-c", str(conf), "-p", f"{tmp_path}/", "-e", str(tmp_path / "error.log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_api_key_settings_are_settings() -> None:
    assert {
        "CHRONOQ_API_KEYS",
        "CHRONOQ_API_KEYS_FILE",
        "CHRONOQ_ALLOW_UNAUTHENTICATED",
    } <= known_variables()


def test_the_image_builds_the_wheel_with_pinned_tools() -> None:
    build = dockerfile_stages()[0]
    copied = [rest.split() for keyword, rest in build if keyword == "COPY"]
    sources = {source.rstrip("/") for parts in copied for source in parts[:-1]}
    # What the wheel is built from: the migrations ship inside it.
    assert {
        "pyproject.toml",
        "README.md",
        "app",
        "chronoq",
        "alembic",
        "constraints.txt",
    } <= sources
    installs = pip_installs(build)
    assert installs, "the build stage installs its build tools"
    for argv in installs:
        assert option(argv, "-c") == "constraints.txt", argv
    builds = [argv for argv in stage_commands(build) if argv[:3] == ["python", "-m", "build"]]
    assert len(builds) == 1, "the build stage builds the wheel with `python -m build`"
    assert {"--wheel", "--no-isolation"} <= set(builds[0]), builds[0]


def test_the_image_installs_the_wheel_with_the_constraints_and_nothing_else() -> None:
    final = dockerfile_final_stage()
    (install,) = pip_installs(final)
    constraints = option(install, "-c")
    assert Path(constraints).name == "constraints.txt", install
    assert [a for a in install if a.endswith(".whl")] == ["/wheels/chronoq-*.whl"], install
    # The migrations come with the wheel: no copy of them (or of anything else from the
    # checkout) in the working directory, which `chronoq migrate` does not need.
    copies = [rest for keyword, rest in final if keyword in {"COPY", "ADD"}]
    assert copies, "the final stage copies the wheel from the build stage"
    assert all(rest.startswith("--from=build ") for rest in copies), copies


def nginx_local_conf() -> str:
    return re.sub(r"#[^\n]*", "", (ROOT / "deploy" / "nginx-local.conf").read_text())


SHIPPED_BALANCERS = {
    "nginx.conf": nginx_conf,
    "nginx-tls.conf": nginx_tls_conf,
    "nginx-local.conf": nginx_local_conf,
}

# What keeps slow or idle clients from holding the balancer (outside `upstream` blocks, whose
# keepalive directives are about the replicas' connections).
CLIENT_LIMITS = (
    "worker_rlimit_nofile",
    "worker_connections",
    "client_header_timeout",
    "client_body_timeout",
    "send_timeout",
    "reset_timedout_connection",
    "lingering_time",
    "keepalive_timeout",
    "keepalive_requests",
    "keepalive_time",
    "limit_conn_zone",
    "limit_conn",
    "limit_conn_status",
)


def client_limits(conf: str) -> dict[str, str]:
    """Each of CLIENT_LIMITS and its value, as the configuration sets it once."""
    outside = re.sub(r"\bupstream\s+\S+\s*\{[^}]*\}", "", conf)
    found: dict[str, str] = {}
    for name in CLIENT_LIMITS:
        values = re.findall(rf"^\s*{name}\s+([^;]+);", outside, re.MULTILINE)
        assert len(values) == 1, f"{name}: {values}"
        found[name] = " ".join(values[0].split())
    return found


def seconds_of(value: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m)?", value)
    assert match, value
    return int(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]


@pytest.mark.parametrize("name", list(SHIPPED_BALANCERS))
def test_every_balancer_bounds_slow_and_idle_clients(name: str) -> None:
    limits = client_limits(SHIPPED_BALANCERS[name]())
    # Thousands of trickling clients fit beside everyone else (1024 did not hold 2,500),
    # with the descriptors for them and for their requests' replica connections.
    connections = int(limits["worker_connections"])
    assert connections >= 8192
    assert int(limits["worker_rlimit_nofile"]) >= 2 * connections
    for timeout in ("client_header_timeout", "client_body_timeout", "send_timeout"):
        assert seconds_of(limits[timeout]) <= 30, (timeout, limits[timeout])
    assert limits["reset_timedout_connection"] == "on"
    assert seconds_of(limits["lingering_time"]) <= 10
    assert seconds_of(limits["keepalive_timeout"]) <= 30
    # One address's requests in progress are limited, and its excess told to slow down.
    zone = re.fullmatch(r"\$binary_remote_addr zone=(\w+):\d+[km]", limits["limit_conn_zone"])
    assert zone, limits["limit_conn_zone"]
    per_address = re.fullmatch(rf"{zone.group(1)} (\d+)", limits["limit_conn"])
    assert per_address, limits["limit_conn"]
    assert int(per_address.group(1)) < connections
    assert limits["limit_conn_status"] == "429"


def test_every_balancer_sets_the_same_client_limits() -> None:
    shipped = {name: client_limits(read()) for name, read in SHIPPED_BALANCERS.items()}
    assert shipped["nginx-tls.conf"] == shipped["nginx.conf"]
    assert shipped["nginx-local.conf"] == shipped["nginx.conf"]


def test_the_local_balancer_proxies_as_the_compose_one_does() -> None:
    plain, local = nginx_conf(), nginx_local_conf()
    assert location(local, "/") == location(plain, "/")
    assert location(local, "= /metrics") == location(plain, "= /metrics")
    # The same upstream but for its servers: the replicas' local ports, with the compose
    # servers' parameters less `resolve`, which an nginx before 1.27.3 refuses.
    name, body = upstream_block(local)
    plain_name, plain_body = upstream_block(plain)
    assert name == plain_name

    def servers(block: str) -> list[tuple[str, str]]:
        return re.findall(r"^\s*server\s+(\S+)([^;]*);", block, re.MULTILINE)

    def without_servers(block: str) -> list[str]:
        lines = (line.strip() for line in block.splitlines())
        return [line for line in lines if line and not line.startswith("server ")]

    assert without_servers(body) == without_servers(plain_body)
    local_servers = servers(body)
    assert [address for address, _ in local_servers] == [
        f"127.0.0.1:{8001 + i}" for i in range(len(replicas()))
    ]
    compose_parameters = {p.replace(" resolve", "") for _, p in servers(plain_body)}
    assert {p for _, p in local_servers} == compose_parameters
    assert not re.search(r"\bresolver?\b", local)
    # It listens where compose publishes the balancer, on the loopback address only: the
    # replicas behind it may run without keys.
    assert re.findall(r"\blisten\s+([^;]+);", local) == ["127.0.0.1:8080"]


def test_nginx_accepts_the_local_balancer(tmp_path: Path) -> None:
    nginx = find_nginx()
    text = (ROOT / "deploy" / "nginx-local.conf").read_text()
    rendered = render_nginx_conf(text, listen=8080, upstreams=[8001, 8002], prefix=tmp_path)
    conf = tmp_path / "nginx-local.conf"
    conf.write_text(rendered)
    checked = subprocess.run(
        [nginx, "-t", "-c", str(conf), "-p", f"{tmp_path}/", "-e", str(tmp_path / "error.log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr


def quick_start_blocks() -> list[tuple[str, list[list[str]]]]:
    """Every shell block of the README and docs/deployment.md that runs `docker run`: its
    page, and its commands split into words (continuation lines joined)."""
    found = []
    for page in (ROOT / "README.md", ROOT / "docs" / "deployment.md"):
        for block in re.findall(r"^```sh\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
            if "docker run" not in block:
                continue
            joined = re.sub(r"\\\n\s*", " ", block)
            commands = [
                shlex.split(part)
                for line in joined.splitlines()
                for part in line.split("&&")
                if part.strip()
            ]
            found.append((page.name, commands))
    return found


def docker_run_options(argv: list[str]) -> tuple[dict[str, list[str]], str]:
    """`docker run`'s options (name -> values) and its image."""
    options: dict[str, list[str]] = {}
    words = iter(argv[2:])
    for word in words:
        if word in {"-d", "--rm", "-it"}:
            continue
        if word.startswith("-"):
            options.setdefault(word, []).append(next(words))
            continue
        return options, word
    pytest.fail(f"no image in {argv}")


def test_the_docs_show_a_one_container_quick_start() -> None:
    assert {page for page, _ in quick_start_blocks()} == {"README.md", "deployment.md"}


@pytest.mark.parametrize(
    "block", quick_start_blocks(), ids=lambda block: f"{block[0]}-{len(block[1])}"
)
def test_the_one_container_quick_start_runs_the_image_on_sqlite_with_a_key(
    block: tuple[str, list[list[str]]],
) -> None:
    _, commands = block
    (run,) = [argv for argv in commands if argv[:2] == ["docker", "run"]]
    options, image = docker_run_options(run)
    builds = [argv for argv in commands if argv[:2] == ["docker", "build"]]
    assert [option(argv, "-t") for argv in builds] == [image], "it runs the image it built"
    settings = dict(entry.partition("=")[::2] for entry in options.get("-e", []))
    assert set(settings) <= known_variables(), "every variable is a setting"
    # Webhooks on SQLite: neither a database nor a broker to run beside it.
    assert "AMQP_URL" not in settings
    assert settings.get("DATABASE_URL", DEFAULT_DATABASE_URL) == DEFAULT_DATABASE_URL
    # The image listens on 0.0.0.0: a key, never the opt-out.
    assert "CHRONOQ_ALLOW_UNAUTHENTICATED" not in settings
    mounts = dict(str(volume).rsplit(":", 2)[:2][::-1] for volume in options.get("-v", []))
    keys = {"CHRONOQ_API_KEYS", "CHRONOQ_API_KEYS_FILE"} & set(settings)
    assert keys, "a key"
    if "CHRONOQ_API_KEYS_FILE" in settings:
        assert settings["CHRONOQ_API_KEYS_FILE"] in mounts, "the key file is mounted there"
    # The database the image makes with DATABASE_URL unset is in a volume, where the image's
    # user may write.
    database = PurePosixPath(instruction("WORKDIR")) / DEFAULT_DATABASE_URL.removeprefix(
        "sqlite:///"
    )
    assert str(database.parent) in mounts, f"{database.parent} is not a volume"
    user = instruction("USER").split(":")[0]
    made = [
        argv for argv in stage_commands(dockerfile_final_stage()) if argv[:2] == ["install", "-d"]
    ]
    assert any(str(database.parent) in argv and option(argv, "-o") == user for argv in made), (
        f"the image makes {database.parent} for {user}"
    )
    # Published on the loopback address, on the port the image serves.
    (published,) = options["-p"]
    host, port, container = published.rsplit(":", 2)
    assert host == "127.0.0.1"
    assert int(container) == exposed_port()
    calls = [argv for argv in commands if argv[:1] == ["curl"]]
    assert calls, "the block shows a call with the key"
    for argv in calls:
        assert any(a.startswith(f"http://127.0.0.1:{port}/") for a in argv), argv
        assert any(a.startswith("Authorization: Bearer ") for a in argv), argv
