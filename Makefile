# The two commands: `make lab` and `make test`. Both build .venv first if needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# A second environment with the ipywidgets Colab ships (requirements-colab.txt).
VENV7  ?= .venv-ipyw7
STAMP7 := $(VENV7)/.installed
IPYW7  := $(shell sed -n 's/^ipywidgets==\([^ ]*\).*/\1/p' requirements-colab.txt)
# Its other versions come from requirements.txt, the one source of versions.
PINS7  := $(shell grep -oE '^(torch|numpy|matplotlib|pytest)==[^ ]+' requirements.txt)
# A third environment with the next torch, a CUDA build (requirements-torch-next.txt). Its other
# versions come from requirements.txt, less JupyterLab, Playwright and ruff (the browser and
# lint tests run once, in .venv).
VENVN  ?= .venv-torch-next
STAMPN := $(VENVN)/.installed
TORCHN := $(shell sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements-torch-next.txt)
PINSN  := $(shell grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' requirements.txt \
                  | grep -vE '^(torch|jupyterlab|playwright|ruff)==')

# make lab TORCH=cpu: install PyTorch's CPU-only build from its own index instead of PyPI's torch,
# which on Linux is the CUDA build (several GB of CUDA libraries a machine without an NVIDIA GPU
# never uses). Same version as requirements.txt; only torch comes from that index (--no-deps), its
# dependencies come with requirements.txt. Leave TORCH unset for the default (requirements.txt).
TORCH  ?=
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell grep -oE '^torch==[^ ]+' requirements.txt)
ifneq ($(filter-out cpu,$(TORCH)),)
$(error TORCH=$(TORCH): use TORCH=cpu for PyTorch's CPU-only build, or leave TORCH unset)
endif
ifeq ($(TORCH),cpu)
ifeq ($(shell uname -s),Darwin)
$(info TORCH=cpu: not needed on a Mac, where PyPI's torch has no CUDA libraries; using the default.)
else
# The choice is remembered in .venv: switching to it rebuilds the environment's torch.
$(STAMP): $(VENV)/.torch-cpu
endif
endif
# A fourth environment as Colab has it: Colab's torch and ipywidgets (requirements-colab.txt, the
# one place their versions are set), everything else from requirements.txt, less JupyterLab,
# Playwright and ruff. Colab's torch is older than ours: its outputs may differ, errors may not.
VENVC  ?= .venv-colab
STAMPC := $(VENVC)/.installed
TORCHC := $(shell sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements-colab.txt)
IPYWC  := $(IPYW7)
PINSC  := $(shell grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' requirements.txt \
                  | grep -vE '^(torch|ipywidgets|jupyterlab|playwright|ruff)==')
# The teacher's environment: everything a learner has plus nbgrader (requirements-teacher.txt).
VENVT  ?= .venv-teacher
STAMPT := $(VENVT)/.installed
COURSE ?= course
# make teacher TORCH=cpu: the same CPU-only torch for the teacher's environment.
ifeq ($(TORCH)$(shell uname -s),cpuLinux)
$(STAMPT): $(VENVT)/.torch-cpu
endif
# The static site (tools/build_site.py, site/conf.py), from its own environment: Sphinx, MyST-NB
# and Pagefind, pinned in requirements-site.txt. Its sources and HTML go in build/.
VENVS    ?= .venv-site
STAMPS   := $(VENVS)/.installed
SITE_SRC ?= build/site-src
SITE     ?= build/site
# The learners' copy of the collection, without solutions (tools/student_copy.py).
STUDENT_COPY ?= ../student-copy


# Python's bytecode cache, kept out of the source tree in build/pycache. `make test` starts
# about 130 Python processes (kernels, torchrun workers, test workers); where the environment
# sets PYTHONDONTWRITEBYTECODE (many CI images and containers do), each of them would compile
# utils/, labchecks/ and tools/ again and each test worker would rewrite every test module's
# asserts again (about 2 s of CPU per test worker, docs/runs.md).
export PYTHONPYCACHEPREFIX := $(CURDIR)/build/pycache
unexport PYTHONDONTWRITEBYTECODE

# `make help` lists the targets by who runs them; each target's `## ...` comment is its line.
FOR_LEARNERS := lab workspace fresh test
FOR_TEACHERS := teacher classroom student-copy test-classroom measure
FOR_AUTHORS  := install check nav labs run-notebooks site test-site test-ipywidgets7 test-torch-next test-colab clean

help:  ## This list
	@for group in "Learners:$(FOR_LEARNERS)" "Teachers:$(FOR_TEACHERS)" "Authors:$(FOR_AUTHORS) help"; do \
		echo "$${group%%:*}"; \
		for target in $${group#*:}; do \
			sed -n "s/^$$target:.*## \(.*\)/  make $$target|\1/p" $(firstword $(MAKEFILE_LIST)) \
				| awk -F'|' '{printf "%-22s %s\n", $$1, $$2}'; \
		done; \
	done

.PHONY: help site test-site lab test check test-ipywidgets7 test-torch-next test-colab test-classroom teacher classroom student-copy install nav labs run-notebooks measure clean

lab: $(STAMP) workspace  ## Copy what is new into my-work/ (never over your copies), start JupyterLab there
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --port=$(PORT) \
		--LabApp.default_url=/lab/tree/$(WORK) $(ROOT_FLAG) $(LAB_ARGS)

# The learner's own folder (git-ignored): copies of the notebooks and labs, never overwritten.
WORK ?= my-work
.PHONY: workspace fresh

workspace:  ## Create or update my-work/ without starting JupyterLab; say which copies are out of date
	@$(PYTHON) -m tools.workspace --folder "$(WORK)"

fresh:  ## A fresh copy of one notebook or lab, keeping yours: make fresh COPY=labs/02_copy_pitfall.ipynb
	@$(PYTHON) -m tools.workspace --folder "$(WORK)" --fresh "$(COPY)"

# The widget tests on ipywidgets 7 run alongside the suite (a few seconds of CPU, mostly
# waiting for imports); their output is printed after the suite's, and either failing fails.
test: $(STAMP) $(STAMP7)  ## Run the whole test suite (unit tests, notebooks, browser, widgets on 7)
	@log=$$(mktemp); \
	$(MAKE) --no-print-directory test-ipywidgets7 >$$log 2>&1 & widgets=$$!; \
	$(BIN)/python -m pytest $(PYTEST_ARGS); suite=$$?; \
	wait $$widgets; again=$$?; \
	echo "--- alongside: the widget tests on ipywidgets $(IPYW7) ---"; cat $$log; rm -f $$log; \
	[ $$suite -eq 0 ] && [ $$again -eq 0 ]

test-ipywidgets7: $(STAMP7)  ## The widget tests again, with ipywidgets 7.7 as on Colab
	EXPECT_IPYWIDGETS=$(IPYW7) $(VENV7)/bin/python -m pytest -o addopts="" -p no:cacheprovider \
		-q -W ignore::DeprecationWarning tests/unit/test_widgets.py

test-torch-next: $(STAMPN)  ## Unit tests, every notebook and lab again, on the next torch (CUDA build)
	cat tests/nbval_sanitize.cfg tests/nbval_sanitize_torch_next.cfg > $(VENVN)/nbval_sanitize.cfg
	EXPECT_TORCH=$(TORCHN) $(VENVN)/bin/python -m pytest \
		--nbval-sanitize-with $(VENVN)/nbval_sanitize.cfg \
		--ignore=tests/e2e/test_browser.py --ignore=tests/repo/test_lint.py $(PYTEST_ARGS)
test-colab: $(STAMPC)  ## Every notebook and lab on Colab's torch and ipywidgets (nbval lax: no errors)
	$(VENVC)/bin/python -c "import torch, ipywidgets as w; \
		assert torch.__version__.split('+')[0] == '$(TORCHC)', torch.__version__; \
		assert w.__version__ == '$(IPYWC)', w.__version__"
	$(VENVC)/bin/python -m pytest -o addopts="" -p no:cacheprovider --nbval-lax \
		--nbval-current-env --nbval-cell-timeout 120 -n 3 --dist loadscope -r fEs \
		$(or $(NB),notebooks labs)
# Not part of `make test` (it would add about 100 s of CPU, about 50 s on two idle cores);
# .ci/run runs it after `make test`.
test-classroom: $(STAMPT)  ## nbgrader grades every lab and a simulated class (cheats, crash, loop)
	$(VENVT)/bin/python -m pytest -o addopts="" -p no:cacheprovider -q -n 2 --dist loadfile tests/classroom

# Nothing is run: the pages show the stored outputs. A broken link between pages fails it.
site: $(STAMPS)  ## The course and its error index as a static, searchable site in build/site
	PYTHONPATH="$(CURDIR)" $(VENVS)/bin/python -m tools.build_site sources $(SITE_SRC)
	rm -rf $(SITE)
	PYTHONPATH="$(CURDIR)" $(VENVS)/bin/python -m sphinx -b html -W --keep-going -q \
		-c site -d build/site-doctrees $(SITE_SRC) $(SITE)
	PYTHONPATH="$(CURDIR)" $(VENVS)/bin/python -m tools.build_site finish $(SITE)

# Not part of `make test` (it needs .venv-site); .ci/run runs it after `make test`.
test-site: site $(STAMP)  ## The built site in headless Chromium: pages, folds, search, nothing hidden
	$(BIN)/python -m pytest -o addopts="" -p no:cacheprovider -q tests/site

$(STAMPS): requirements-site.txt
	test -x $(VENVS)/bin/python || $(PYTHON) -m venv $(VENVS)
	$(VENVS)/bin/python -m pip install --quiet -r requirements-site.txt
	touch $(STAMPS)

teacher: $(STAMPT)  ## Build .venv-teacher: the learner's environment plus nbgrader

classroom: $(STAMPT)  ## An nbgrader course folder with every lab released (COURSE=course); keeps sources you edited
	$(VENVT)/bin/python -m tools.classroom $(COURSE) $(CLASSROOM_ARGS)

student-copy:  ## The learners' copy without solutions or tests, for nbgitpuller and badges (STUDENT_COPY=../student-copy)
	$(PYTHON) -m tools.student_copy "$(STUDENT_COPY)" $(STUDENT_COPY_ARGS)

install: $(STAMP)  ## Build .venv (requirements.txt, then utils and labchecks) without starting anything

check: $(STAMP)  ## One changed notebook or lab in about a minute: make check NB=notebooks/01_tensor_to.ipynb
	@test -n "$(NB)" || { echo "usage: make check NB=notebooks/01_tensor_to.ipynb (or labs/NN_topic.ipynb, labs/solutions/NN_topic.ipynb)"; exit 2; }
	$(BIN)/python -m tools.check $(NB)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	-$(BIN)/python -m tools.torch_build_hint $(VENV)
	touch $(STAMP)

$(VENV)/.torch-cpu:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-deps --index-url $(TORCH_CPU_INDEX) "$(TORCH_PIN)+cpu"
	touch $@

$(VENVT)/.torch-cpu:
	test -x $(VENVT)/bin/python || $(PYTHON) -m venv $(VENVT)
	$(VENVT)/bin/python -m pip install --quiet --no-deps --index-url $(TORCH_CPU_INDEX) "$(TORCH_PIN)+cpu"
	touch $@

$(STAMP7): requirements-colab.txt requirements.txt pyproject.toml
	test -x $(VENV7)/bin/python || $(PYTHON) -m venv $(VENV7)
	$(VENV7)/bin/python -m pip install --quiet ipywidgets==$(IPYW7) $(PINS7)
	$(VENV7)/bin/python -m pip install --quiet --no-deps -e .
	touch $(STAMP7)

$(STAMPN): requirements-torch-next.txt requirements.txt pyproject.toml
	test -x $(VENVN)/bin/python || $(PYTHON) -m venv $(VENVN)
	$(VENVN)/bin/python -m pip install --quiet -r requirements-torch-next.txt $(PINSN)
	$(VENVN)/bin/python -m pip install --quiet --no-deps -e .
	touch $(STAMPN)
$(STAMPC): requirements-colab.txt requirements.txt pyproject.toml
	test -x $(VENVC)/bin/python || $(PYTHON) -m venv $(VENVC)
	$(VENVC)/bin/python -m pip install --quiet -r requirements-colab.txt $(PINSC)
	$(VENVC)/bin/python -m pip install --quiet --no-deps -e .
	touch $(STAMPC)
$(STAMPT): requirements-teacher.txt requirements.txt pyproject.toml
	test -x $(VENVT)/bin/python || $(PYTHON) -m venv $(VENVT)
	$(VENVT)/bin/python -m pip install --quiet -r requirements.txt -r requirements-teacher.txt
	$(VENVT)/bin/python -m pip install --quiet --no-deps -e .
	touch $(STAMPT)

nav: $(STAMP)  ## Regenerate what is derived from the notebooks: README table, badges, navigation, folds, docs/errors.md
	$(BIN)/python -m tools.build_nav

labs: $(STAMP)  ## Regenerate student labs from labs/solutions/ and re-run both versions
	$(BIN)/python -m tools.build_labs

run-notebooks: $(STAMP)  ## Re-execute notebooks in place (all, or NB=...), then make nav
	$(BIN)/python -m tools.run_notebooks $(NB)

measure: $(STAMP)  ## Run All time, CPU time and peak memory (PSS, all its processes) per notebook
	$(BIN)/python -m tools.measure_notebooks $(NB)

clean:  ## Remove the environments and build caches (.venv, .venv-ipyw7, .venv-colab, .venv-teacher, ...)
	rm -rf $(VENV) $(VENV7) $(VENVN) $(VENVC) $(VENVT) $(VENVS) build *.egg-info .pytest_cache .ruff_cache
