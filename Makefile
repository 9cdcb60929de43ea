# The two commands: `make lab` and `make test`. Both build .venv first if needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test install nav labs run-notebooks measure clean

lab: $(STAMP)  ## Start JupyterLab on the notebooks
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --port=$(PORT) \
		--LabApp.default_url=/lab/tree/notebooks $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP)  ## Run the whole test suite (unit tests, notebooks under nbval, repo checks)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

nav: $(STAMP)  ## Regenerate the README table and each notebook's badges and navigation
	$(BIN)/python tools/build_nav.py

labs: $(STAMP)  ## Regenerate student labs from labs/solutions/ and re-run both versions
	$(BIN)/python tools/build_labs.py

run-notebooks: $(STAMP)  ## Re-execute notebooks in place (all, or NB=notebooks/01_tensor_to.ipynb)
	$(BIN)/python tools/run_notebooks.py $(NB)

measure: $(STAMP)  ## Run All wall time and kernel peak RSS for each notebook
	$(BIN)/python tools/measure_notebooks.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
