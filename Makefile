# The two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint docs bench release clean

# the compiled core (csrc/) is built by the package's own build: a change there reinstalls
$(STAMP): pyproject.toml setup.py $(wildcard csrc/*.h csrc/*.cpp)
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned, so that nothing else pulls a newer (CUDA) build
	$(BIN)/python -m pip install --disable-pip-version-check -q "torch==2.13.0"
	# every extra (torch: already here, hf, report, ray, docs): the tests use them all, so CI installs them
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[dev,ray,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/seqpack demo

# the static checks (pyproject.toml), on every Python file of the repository: ruff lints and checks
# the format, mypy type-checks
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# the whole suite, every tier, after the static checks: two workers (a file's tests on one, so its
# fixtures are built once), then the multi-process launches alone (their ranks want the cores);
# the ten slowest close each report
test: lint
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not multiprocess" --durations=10
	$(BIN)/python -m pytest -m multiprocess --durations=10

# the unit tier, for every edit: no builds, installs, docs blocks, multi-process launches or slow tests
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow and not multiprocess and not docs and not install and not gpu" --durations=10

# the documentation site, strictly (broken links, unknown API names fail), offline, into site/
docs: $(STAMP)
	$(BIN)/python -m mkdocs build --strict -f mkdocs.yml -d site

bench: $(STAMP)
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[dev,ray,bench]'
	$(BIN)/python benchmarks/bpe_train.py
	$(BIN)/python benchmarks/encode.py
	$(BIN)/python benchmarks/first_command.py
	$(BIN)/python benchmarks/plan.py
	$(BIN)/python benchmarks/tokenize_store.py
	$(BIN)/python benchmarks/pack_dataset.py
	$(BIN)/python benchmarks/throughput.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/cli_runs.py
	$(BIN)/python benchmarks/chat_sft.py --out benchmarks/results/chat_sft.json
	$(BIN)/python benchmarks/preference.py --out benchmarks/results/preference.json
	$(BIN)/python benchmarks/vision.py --out benchmarks/results/vision.json
	$(BIN)/python benchmarks/stream.py --out benchmarks/results/stream.json
	$(BIN)/python benchmarks/stream_train.py --out benchmarks/results/stream_train.json
	$(BIN)/python benchmarks/context_parallel.py --out benchmarks/results/context_parallel.json
	$(BIN)/python benchmarks/layer_attention.py --out benchmarks/results/layer_attention.json
	$(BIN)/python benchmarks/balance.py --out benchmarks/results/balance.json
	$(BIN)/python benchmarks/balance_torchrun.py --out benchmarks/results/balance_torchrun.json

# a release: the version stamped (tools/release.py: _version.py, CHANGELOG's Unreleased, the install
# lines), then the sdist and the wheel, repaired to a manylinux tag, in dist/ (other platforms: cibuildwheel)
release: $(STAMP)
	@test -n "$(VERSION)" || (echo "usage: make release VERSION=X.Y.Z" >&2; exit 2)
	$(BIN)/python tools/release.py $(VERSION)
	rm -rf dist && $(BIN)/python -m build --outdir dist/build
	$(BIN)/auditwheel repair --wheel-dir dist dist/build/*.whl && mv dist/build/*.tar.gz dist/ && rm -rf dist/build

clean:
	rm -rf $(VENV) demo_out site build src/*.egg-info src/seqpack/_native*.so .mypy_cache .ruff_cache
