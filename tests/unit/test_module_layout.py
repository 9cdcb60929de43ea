"""utils is one topic per module; the names the notebooks reach stay where they reach them."""

from __future__ import annotations

import importlib
import inspect

import pytest

import utils


@pytest.mark.parametrize(("module", "name", "home"), [
    ("utils.widgets", "run_scenario", "utils.scenarios"),    # 05's stored output names it there
    ("utils.figures", "load_table", "utils.scenarios"),      # 05 imports both from figures
    ("utils.figures", "run_load_cases", "utils.scenarios"),
    ("utils.dcp", "shard_figure", "utils.figures"),          # 08 calls dcp_tools.shard_figure
    ("utils.placement", "placement_figure", "utils.figures"),
])
def test_a_moved_name_is_still_reached_where_the_notebooks_reach_it(module, name, home):
    assert getattr(importlib.import_module(module), name) is getattr(
        importlib.import_module(home), name)


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        importlib.import_module("utils.widgets").nothing_here  # noqa: B018


@pytest.mark.parametrize(("module", "first"), [
    ("utils.devices", "pick_device"),          # 00
    ("utils.figures", "names_and_tensors"),    # 01
    ("utils.ops", "aten_ops"),                 # 01
    ("utils.widgets", "quiz"),                 # 01
    ("utils.placement", "where"),              # 03
    ("utils.scenarios", "explore_save_load"),  # 05
    ("utils.text", "format_bytes"),            # 05
    ("utils.traffic", "Ledger"),               # 07
])
def test_each_modules_first_function_is_the_one_its_notebook_names(module, first):
    loaded = importlib.import_module(module)
    defined = [value for value in vars(loaded).values()
               if (inspect.isfunction(value) or inspect.isclass(value))
               and value.__module__ == module]
    assert min(defined, key=lambda v: inspect.getsourcelines(v)[1]).__name__ == first


def test_every_name_the_notebooks_use_from_utils_is_still_there():
    for name in ("explore_save_load", "placement_figure", "quiz", "view_placement", "where",
                 "pick_device", "Ledger", "aten_ops", "format_bytes"):
        assert hasattr(utils, name), name
