# Two commands on a fresh machine:
#   make run    the embedded default (SQLite + file-system broker under var/): worker + scheduler
#               + the admin at a printed address, with a generated demo login
#   make test   the test suite (PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379)
#   make screenshots  the admin's pictures in docs/screenshots/, taken afresh by the browser
#               test tests/test_admin_screenshots_browser.py with the demo's data (an ordinary
#               test run saves them under var/screenshots/ only)
# The newest supported Python on this machine (python3.13, 3.12, then 3.11: on PATH or among
# pyenv's versions), with the newest Django and Celery it takes: the current stack.
PYTHON ?= $(shell python3 scripts/stack.py python)
VENV ?= .venv
PY := $(VENV)/bin/python
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/duecourse
TEST_BROKER_URL ?= redis://127.0.0.1:6379/0
# The suite runs in this many processes (pytest-xdist), each file in one of them except the long
# scenarios of modules marked spread, the long units first (tests/distribution.py): the
# real-process tests spend most of their time waiting on workers, schedulers and servers, not on
# the CPU, so four keep two cores busy (docs/testing.md has the measurements). 0: one process.
TEST_WORKERS ?= 4
# One specification, every database: the modules marked `specification` (pytestmark) run on
# PostgreSQL with the rest of the suite, then on SQLite (the embedded default; SQLITE=0 skips
# that pass) and, with MARIADB=1 (CI sets it), on MariaDB/MySQL at TEST_MARIADB_URL. Outside
# PostgreSQL the suite itself picks them (tests/conftest.py, engine_rule).
SQLITE ?= 1
MARIADB ?= 0
TEST_MARIADB_URL ?= mysql://root@127.0.0.1:3306/duecourse
# Three: the MariaDB pass leaves a core idle about half of its time with two (its test
# databases are made by DDL that waits on the server, its fault tests on their processes).
MARIADB_WORKERS ?= 3

# Python may cache bytecode: a machine that sets PYTHONDONTWRITEBYTECODE (as some CI images do)
# would otherwise compile Django, Celery and the suite afresh in every process the tests start
# (about a second of CPU each; pytest's assertion rewriting of the suite, eight per process).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-sqlite test-mariadb lint bench install print-specification screenshots

# pip fetches uv alone; uv installs the rest from its cache (about a fifth of pip's time).
UV_PIP := $(VENV)/bin/uv pip install --quiet --python $(PY)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet 'uv>=0.5'
	$(UV_PIP) -e '.[test]'
	$(UV_PIP) -e ".[$$($(PY) scripts/stack.py extras $$($(PY) -m django --version))]"
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	$(PY) manage.py migrate --noinput -v0
	$(PY) manage.py loaddemo --if-allowed
	$(PY) manage.py runstack

test: $(VENV)/.installed
	scripts/test-services.sh
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=30 $(PYTEST_ARGS)
	if [ "$(SQLITE)" = 1 ]; then $(MAKE) --no-print-directory test-sqlite; fi
	if [ "$(MARIADB)" = 1 ]; then $(MAKE) --no-print-directory test-mariadb; fi

# The specification on SQLite (a file under var/ for each pytest-xdist process, made afresh by
# the run): in-process tests, CPU-bound, so one process per core.
test-sqlite: $(VENV)/.installed
	DATABASE_URL=sqlite:///$(CURDIR)/var/test-embedded.sqlite3 \
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --no-loadscope-reorder \
	  --durations=10 tests

# The specification on MariaDB/MySQL: the `mysql` extra (mysqlclient, built against the
# client headers that scripts/test-services.sh installs), a test database of the run's own.
$(VENV)/.mysql: $(VENV)/.installed
	MARIADB=1 scripts/test-services.sh
	$(UV_PIP) -e '.[mysql]'
	touch $@

test-mariadb: $(VENV)/.mysql
	MARIADB=1 scripts/test-services.sh
	DATABASE_URL=$(TEST_MARIADB_URL) \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	$(PY) -m pytest -q -p no:cacheprovider -n $(MARIADB_WORKERS) --dist loadgroup \
	  --no-loadscope-reorder --durations=10 tests

screenshots: $(VENV)/.installed
	scripts/test-services.sh
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	DUECOURSE_UPDATE_SCREENSHOTS=1 \
	$(PY) -m pytest -q -p no:cacheprovider tests/test_admin_screenshots_browser.py

# The specification's modules: the ones every database runs.
print-specification:
	@grep -rlE '^pytestmark = .*specification' tests | sort

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

bench: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet -e '.[test,bench]'
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) bench/run_all.py
