# syntax=docker/dockerfile:1
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 chronoq
WORKDIR /srv/chronoq
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/* && rm -rf /wheels
# Migrations are read from the working directory (alembic.ini, alembic/).
COPY alembic.ini ./
COPY alembic ./alembic
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
