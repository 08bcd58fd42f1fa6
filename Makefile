# Shortcuts; the scripts under scripts/ do the work (and set up .venv when needed).
SHELL := bash
.DEFAULT_GOAL := help

.PHONY: help demo test quick legs lint format generate bench profile reliability clean distclean

help:
	@echo "make demo       run the demo project (scripts/demo; DEMO_PORT=8000)"
	@echo "make test       ruff + the whole test suite (scripts/test; ARGS='-k name' for pytest)"
	@echo "make quick      ruff + the contract on one backend and the surfaces, ~30 s (scripts/test-quick)"
	@echo "make legs       the oldest and a middle supported combination (scripts/test-legs)"
	@echo "make lint       ruff check, ruff format --check and mypy (with and without otel)"
	@echo "make format     ruff format + ruff check --fix"
	@echo "make generate   write the sync twins of the async methods (scripts/unasync.py)"
	@echo "make bench      run the benchmarks (benchmarks/run.py)"
	@echo "make profile    where an acquire+release spends its time (benchmarks/profile_hot_path.py)"
	@echo "make reliability  the fault suite in full, then docs/RELIABILITY.md (scripts/reliability)"
	@echo "make clean      remove build artefacts and caches (keeps .venv)"
	@echo "make distclean  clean, and remove .venv too"

demo:
	scripts/demo

test:
	scripts/test $(ARGS)

quick:
	scripts/test-quick $(ARGS)

legs:
	scripts/test-legs $(ARGS)

lint:
	source scripts/_venv.sh && "$$VENV/bin/ruff" check . && "$$VENV/bin/ruff" format --check . \
		&& scripts/typecheck

format:
	source scripts/_venv.sh && "$$VENV/bin/ruff" format . && "$$VENV/bin/ruff" check --fix .

generate:
	source scripts/_venv.sh && "$$PY" scripts/unasync.py

bench:
	DISTLOCK_EXTRAS=test,hiredis,django-redis,bench source scripts/_venv.sh && \
		.venv/bin/python benchmarks/run.py $(ARGS)

profile:
	DISTLOCK_EXTRAS=test,hiredis,django-redis,bench source scripts/_venv.sh && \
		.venv/bin/python benchmarks/profile_hot_path.py --py-spy $(ARGS)

reliability:
	scripts/reliability $(ARGS)

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .coverage htmlcov
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +
	rm -f testproject/db.sqlite3 .venv/demo-redis.log

distclean: clean
	rm -rf .venv .venv-oldest .venv-middle .hypothesis
