PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
FUZZ_EXAMPLES ?= 300

.PHONY: run test fuzz check lint openapi bench constraints clean

# Installs take the versions pinned in constraints.txt (pyproject.toml has the ranges).
$(BIN)/chronoq: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade -c constraints.txt pip
	$(BIN)/pip install --quiet -c constraints.txt -e .
	touch $@

$(VENV)/.dev: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade -c constraints.txt pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

## run: install, migrate and serve on 127.0.0.1:$(PORT) (SQLite under ./data by default)
run: $(BIN)/chronoq
	$(BIN)/chronoq migrate
	$(BIN)/chronoq serve --host 127.0.0.1 --port $(PORT)

## test: the whole suite on TEST_WORKERS (3) pytest-xdist processes; TEST_WORKERS=0 runs it in
## one (PostgreSQL, MariaDB, RabbitMQ and Chromium tests skip locally when those are missing).
## Cases marked `alone` (they restart the broker every other case uses) run afterwards, by
## themselves, collected from the files that mark them. The 20 slowest cases are listed at the
## end, so the budget has its evidence. Bytecode is cached under __pycache__ (git-ignored)
## whatever PYTHONDONTWRITEBYTECODE says: the replicas the suite starts, the second step and
## the next run then do not compile (and rewrite the asserts of) the same modules again.
TEST_WORKERS ?= 3
ALONE_FILES := $(shell grep -rlE 'mark\.alone' tests)
test: $(VENV)/.dev
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) -m "not alone" --durations=20
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 0 -m alone $(ALONE_FILES)

## fuzz: the suite's schemathesis run at length: FUZZ_EXAMPLES (300) examples per operation, not 10
fuzz: $(VENV)/.dev
	CHRONOQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/contract/test_fuzz.py

## lint: formatting, lint, types (mypy over app, chronoq, tests and bench), import contracts
lint: $(VENV)/.dev
	$(BIN)/ruff format --check app chronoq alembic tests bench
	$(BIN)/ruff check app chronoq alembic tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

## check: lint, then the suite
check: lint test

## openapi: regenerate openapi/openapi.json from the app
openapi: $(VENV)/.dev
	$(BIN)/chronoq openapi --output openapi/openapi.json

## bench: W1 and W2 on PostgreSQL, MySQL/MariaDB and SQLite, W1 with RabbitMQ (see docs/benchmark*.md)
bench: $(VENV)/.dev
	$(BIN)/python bench/run.py
	$(BIN)/python bench/rabbitmq.py

## constraints: pin constraints.txt to what .venv has, keeping its header (see its refresh steps)
constraints:
	{ sed '/^[^#]/,$$d' constraints.txt; \
	  $(BIN)/pip freeze --all --exclude-editable | grep -v '^chronoq=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
