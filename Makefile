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
# The embedded default is a product path too: the claim, attempt and policy specifications, the
# dashboard's reads, history pruning, backfill and the emailer's runs (its ledger statements are
# written for both databases) run on SQLite as well (SQLITE=0 skips that pass).
SQLITE ?= 1
SQLITE_TESTS := tests/scheduling/test_claims.py tests/scheduling/test_attempts.py \
	tests/scheduling/test_overlap_claims.py \
	tests/scheduling/test_validation.py tests/scheduling/test_api.py \
	tests/scheduling/test_dashboard.py tests/scheduling/test_retention.py \
	tests/emailer/test_runs.py tests/subscriptions/test_renewals.py \
	tests/scheduling/test_checks.py tests/scheduling/test_argument_limits.py \
	tests/scheduling/test_running_limits.py tests/scheduling/test_ledger.py \
	tests/scheduling/test_engines.py \
	tests/scheduling/test_backfill.py tests/scheduling/test_calendars.py \
	tests/scheduling/test_previews.py tests/scheduling/test_timing_budget.py \
	tests/scheduling/test_argument_binding.py tests/scheduling/test_declarations.py \
	tests/scheduling/test_waiting_bound.py tests/scheduling/test_never_completing.py \
	tests/scheduling/test_exports.py tests/emailer/test_exports.py \
	tests/subscriptions/test_exports.py

.PHONY: run test lint bench install print-sqlite-tests screenshots

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	$(VENV)/bin/pip install --quiet -e ".[$$($(PY) scripts/stack.py extras $$($(PY) -m django --version))]"
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
	if [ "$(SQLITE)" = 1 ]; then \
	  DATABASE_URL=sqlite:///$(CURDIR)/var/test-embedded.sqlite3 \
	  $(PY) -m pytest -q -p no:cacheprovider -m 'not slow' --durations=10 $(SQLITE_TESTS); fi

screenshots: $(VENV)/.installed
	scripts/test-services.sh
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
	DUECOURSE_UPDATE_SCREENSHOTS=1 \
	$(PY) -m pytest -q -p no:cacheprovider tests/test_admin_screenshots_browser.py

print-sqlite-tests:
	@echo $(SQLITE_TESTS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

bench: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet -e '.[test,bench]'
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) bench/run_all.py
