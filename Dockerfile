# syntax=docker/dockerfile:1
FROM python:3.11-slim AS build
WORKDIR /src
# The build tools at their pinned versions, and the build runs with them (no isolated build
# environment downloading its own).
COPY constraints.txt ./
RUN pip install --no-cache-dir -c constraints.txt build setuptools
COPY pyproject.toml README.md ./
COPY app ./app
COPY chronoq ./chronoq
COPY alembic ./alembic
RUN python -m build --wheel --no-isolation --outdir /wheels . && cp constraints.txt /wheels/

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 chronoq
# The default SQLite database (DATABASE_URL unset) is ./data/chronoq.db: a directory the user
# writes, where a volume mounted at /srv/chronoq/data starts out owned by that user too.
RUN install -d -o chronoq -g chronoq /srv/chronoq/data
WORKDIR /srv/chronoq
# The wheel is the whole service, its migrations included (alembic/, as app.migrations), so
# nothing else is copied; its dependencies install at the versions constraints.txt pins.
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir -c /wheels/constraints.txt /wheels/chronoq-*.whl && rm -rf /wheels
USER chronoq
ENV PYTHONUNBUFFERED=1
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
# Exec form, so SIGTERM reaches uvicorn and the delivery loop stops gracefully. The keep-alive
# timeout stays above the balancer's (deploy/nginx.conf: 4 s), so the balancer closes idle
# connections first and never sends a request on one the replica is closing. `chronoq serve`
# runs uvicorn on app.main:app, and refuses 0.0.0.0 without CHRONOQ_API_KEYS (or _FILE, or
# CHRONOQ_ALLOW_UNAUTHENTICATED=true): the image never serves an open API by accident.
CMD ["chronoq", "serve", "--host", "0.0.0.0", "--port", "8000", "--timeout-keep-alive", "5"]
