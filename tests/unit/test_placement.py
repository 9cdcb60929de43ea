"""utils.placement: where() finds every tensor, audit() finds every straggler and no others."""

from __future__ import annotations

import statistics
import sys
import time
import warnings

import matplotlib
import pytest
import torch
import torch.nn.utils.prune
from torch import nn
from torch.overrides import TorchFunctionMode

import utils
from utils import placement

matplotlib.use("Agg")


class Block(nn.Module):
    """One of each kind of tensor a module can hold."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.register_buffer("running", torch.zeros(3))
        self.register_buffer("mask", torch.ones(3), persistent=False)
        self.scale = torch.ones(3)  # plain attribute: left behind
        self.stats = [torch.zeros(2)]  # tensor in a list: left behind
        self.lookup = {"bias": torch.zeros(1)}  # tensor in a dict: left behind
        self.heads = [nn.Linear(3, 1)]  # module in a plain list: left behind
        self.experts = {"a": nn.Linear(3, 1)}  # module in a plain dict: left behind


class Deep(nn.Module):
    """Block three modules deep, inside a Sequential and a ModuleDict."""

    def __init__(self):
        super().__init__()
        self.outer = nn.Sequential(nn.ModuleDict({"inner": Block()}))


LEFT_BEHIND = {
    "scale": placement.TENSOR_ATTRIBUTE,
    "stats.0": placement.IN_LIST,
    "lookup.bias": placement.IN_DICT,
    "heads.0.weight": "parameter of a module in a plain list",
    "heads.0.bias": "parameter of a module in a plain list",
    "experts.a.weight": "parameter of a module in a plain dict",
    "experts.a.bias": "parameter of a module in a plain dict",
}
MOVED = {
    "linear.weight": placement.PARAMETER,
    "linear.bias": placement.PARAMETER,
    "running": placement.BUFFER,
    "mask": placement.NON_PERSISTENT_BUFFER,
}


def _kinds(table, prefix=""):
    return {p.name.removeprefix(prefix): (p.kind, p.moved_by_to) for p in table}


def test_where_lists_every_kind_of_tensor_with_whether_module_to_moves_it():
    kinds = _kinds(utils.where(Block()))
    expected = {name: (kind, False) for name, kind in LEFT_BEHIND.items()}
    expected |= {name: (kind, True) for name, kind in MOVED.items()}
    assert kinds == expected


def test_where_gives_dotted_paths_several_modules_deep():
    names = {p.name for p in utils.where(Deep())}
    assert "outer.0.inner.heads.0.weight" in names
    assert "outer.0.inner.lookup.bias" in names
    assert len(names) == len(LEFT_BEHIND) + len(MOVED)


def test_where_reports_device_dtype_and_shape():
    model = Block().to(torch.float64).to("meta")
    rows = {p.name: p for p in utils.where(model)}
    assert rows["linear.weight"].device == torch.device("meta")
    assert rows["linear.weight"].dtype == torch.float64
    assert rows["linear.weight"].shape == (3, 3)
    assert rows["scale"].device == torch.device("cpu") and rows["scale"].dtype == torch.float32


def test_where_accepts_a_tensor_and_a_dict_of_tensors_and_modules():
    assert [p.name for p in utils.where(torch.ones(2))] == ["tensor"]
    batch = {"inputs": torch.ones(2), "model": nn.Linear(2, 1), "more": [torch.ones(1)]}
    table = utils.where(batch)
    assert [p.name for p in table] == ["inputs", "model.weight", "model.bias", "more.0"]
    assert [p.moved_by_to for p in table] == [None, True, True, None]


def test_where_renders_as_text_and_as_html():
    table = utils.where(Block())
    text = str(table)
    assert text.splitlines()[0].split()[:2] == ["name", "kind"]
    assert "heads.0.weight" in text and "NO" in text
    html = table._repr_html_()
    assert html.startswith("<table>") and "<td style='text-align:left'>scale</td>" in html
    assert str(placement.PlacementTable()) == "(no tensors found)"


def test_where_marks_lstm_flat_weights_as_the_registered_parameters():
    rows = [p for p in utils.where(nn.LSTM(3, 4)) if p.name.startswith("_flat_weights")]
    assert rows and all(p.alias_of and p.moved_by_to for p in rows)


def test_where_rejects_what_holds_no_tensors():
    with pytest.raises(TypeError, match="module, a tensor, or a dict/list"):
        utils.where("model")


@pytest.mark.parametrize("model_class", [Block, Deep])
def test_audit_finds_every_straggler_after_to(model_class):
    model = model_class().to("meta")
    prefix = "outer.0.inner." if model_class is Deep else ""
    findings = utils.audit(model, "meta")
    assert {f.name.removeprefix(prefix) for f in findings} == set(LEFT_BEHIND)
    assert not any(f.moved_by_to for f in findings)


def test_audit_also_reports_registered_tensors_not_moved_yet():
    findings = utils.audit(Block(), "meta")
    registered = {f.name for f in findings if f.moved_by_to}
    assert registered == set(MOVED)


def test_audit_fix_names_the_audited_module_and_the_submodule_not_a_model():
    by_name = {f.name: str(f) for f in utils.audit(Block(), "meta") if f.moved_by_to}
    assert "call .to('meta') on the Block you audited;" in by_name["running"]
    assert ("call .to('meta') on the Block you audited (or .to('meta') on its submodule "
            "linear alone)") in by_name["linear.weight"]
    loss = utils.audit(nn.CrossEntropyLoss(weight=torch.ones(3)), "meta")
    assert "on the CrossEntropyLoss you audited" in str(loss[0])
    assert not any("model" in str(f) for f in [*by_name.values(), *loss])
    assert not any("move the data" in str(f) for f in [*by_name.values(), *loss])  # one way


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("scale", "register_buffer('scale'"),
        ("stats.0", "nn.ParameterList"),
        ("lookup.bias", "nn.ParameterDict"),
        ("heads.0.weight", "nn.ModuleList"),
        ("experts.a.bias", "nn.ModuleDict"),
    ],
)
def test_each_finding_names_the_path_says_why_and_gives_the_fix(name, fix):
    findings = {f.name: str(f) for f in utils.audit(Block().to("meta"), "meta")}
    message = findings[name]
    assert message.startswith(f"{name} (")
    assert "is on cpu and .to('meta') leaves it there" in message
    assert fix in message


def test_fix_for_a_plain_tensor_attribute_makes_a_constant_a_buffer_not_a_parameter():
    """Both fixes move with .to; only the Parameter (even frozen) reaches parameters()."""
    message = {f.name: str(f) for f in utils.audit(Block(), "meta")}["scale"]
    assert "a constant becomes a buffer" in message
    assert "a tensor to train becomes an nn.Parameter" in message
    with_buffer, with_frozen = nn.Module(), nn.Module()
    with_buffer.register_buffer("scale", torch.ones(3))
    with_frozen.scale = nn.Parameter(torch.ones(3), requires_grad=False)
    for module in (with_buffer, with_frozen):
        assert module.to("meta").scale.is_meta  # both are moved by Module.to
    assert list(with_buffer.parameters()) == []
    assert [name for name, _ in with_frozen.named_parameters()] == ["scale"]


def test_printed_findings_give_the_reason_and_fix_once_per_container():
    model = Block()
    model.heads.append(nn.Linear(3, 1))  # heads.0.* and heads.1.*: one container, four tensors
    findings = utils.audit(model.to("meta"), "meta")
    lines = str(findings).splitlines()[1:]
    heads = [line for line in lines if ". heads." in line]
    assert len(heads) == 4 and "Fix: hold the modules in nn.ModuleList" in heads[0]
    first = heads[0].split(".", 1)[0]
    assert all(line.endswith(f"too: same reason and fix as {first}.") for line in heads[1:])
    experts = [line for line in lines if ". experts." in line]  # another container: its own
    assert "Fix: hold the modules in nn.ModuleDict" in experts[0]
    assert experts[1].endswith(f"fix as {experts[0].split('.', 1)[0]}.")
    assert sum("Fix:" in line for line in lines) == len(lines) - 4  # 3 heads + 1 expert said once


def test_audit_of_a_fixed_model_has_no_findings():
    model = Block()
    del model.scale, model.stats, model.lookup, model.heads, model.experts
    model.register_buffer("scale", torch.ones(3))
    model.heads = nn.ModuleList([nn.Linear(3, 1)])
    findings = utils.audit(model.to("meta"), "meta")
    assert findings == []
    assert str(findings) == "No findings: every tensor ends up on meta after .to('meta')."


def _clean_models():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nn.Transformer warns about nested tensors
        transformer = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=2,
                                     num_decoder_layers=2, dim_feedforward=32)
    return {
        "Transformer": transformer,
        "LSTM": nn.LSTM(4, 8, num_layers=2, bidirectional=True),
        "BatchNorm2d": nn.BatchNorm2d(3),
        "Embedding": nn.Embedding(10, 4),
        "Sequential": nn.Sequential(  # structure only: audit never runs the model
            nn.Embedding(10, 4), nn.LSTM(4, 4), nn.BatchNorm2d(4), transformer),
    }


@pytest.mark.parametrize("name", list(_clean_models()))
@pytest.mark.parametrize("target", ["meta", "cpu"])
def test_audit_finds_nothing_on_standard_layers(name, target):
    model = _clean_models()[name].to(target)
    assert utils.audit(model, target) == []
    assert utils.where(model).devices() == {torch.device(target)}


def test_audit_accepts_devices_this_machine_lacks():
    findings = utils.audit(nn.Linear(2, 2), "cuda:3")
    assert {f.target for f in findings} == {torch.device("cuda:3")}
    assert len(findings) == 2


def test_audit_reads_a_bare_accelerator_name_as_the_device_to_puts_tensors_on():
    findings = utils.audit(nn.Linear(2, 2), "cuda")
    expected = torch.cuda.current_device() if torch.cuda.is_available() else 0
    assert findings.target == torch.device("cuda", expected)


def test_audit_rejects_what_is_not_a_module():
    with pytest.raises(TypeError, match="audit\\(\\) needs an nn.Module, got Tensor"):
        utils.audit(torch.ones(2), "cpu")
    with pytest.raises(TypeError, match="got dict"):
        utils.audit({"model": nn.Linear(1, 1)}, "cpu")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cpu:-1:2"])
def test_audit_rejects_a_device_torch_cannot_parse(device):
    with pytest.raises(ValueError, match="not a device string PyTorch understands"):
        utils.audit(nn.Linear(1, 1), device)


class _RecordCalls(TorchFunctionMode):
    """Records every torch function and tensor method called while it is active."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__qualname__", getattr(func, "__name__", str(func))))
        return func(*args, **(kwargs or {}))


def test_audit_never_copies_tensor_data():
    model = Block()
    with _RecordCalls() as recorder:
        utils.audit(model, "meta")
        utils.where(model)
    # Allowed: attribute reads (Tensor.device.__get__ ...) and building the torch.device target.
    copying = [n for n in recorder.names if not n.endswith("__get__") and n != "device"]
    assert copying == [], f"audit called tensor functions that may copy: {copying}"
    assert recorder.names  # the recorder works: it saw the .device/.dtype/.shape reads


def test_placement_figure_marks_stragglers():
    figure = utils.placement_figure(Block().to("meta"), "meta")
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert any("scale  [cpu]" == t for t in texts)
    assert any("left behind by .to" in t for t in texts)
    assert figure.axes[0].get_title() == "Where the tensors of Block live"
    with pytest.raises(TypeError, match="needs an nn.Module"):
        utils.placement_figure(torch.ones(1))


def _meta_transformer(layers: int) -> nn.Module:
    """An encoder-decoder transformer built on meta: the structure, no memory, no init time."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            return nn.Transformer(num_encoder_layers=layers, num_decoder_layers=layers)


def _median_seconds_interleaved(calls: dict, runs: int = 9) -> dict:
    """Median time of each call, runs interleaved so that load hits every call alike."""
    timings = {name: [] for name in calls}
    for _ in range(runs):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            timings[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in timings.items()}


def _python_lines_executed(call) -> int:
    """How many Python lines ``call()`` executes (its own and everything it calls).

    A count, not a time: the same on a quiet or a loaded machine, fast or slow."""
    executed = 0

    def tracer(frame, event, arg):
        nonlocal executed
        executed += event == "line"
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(previous)
    return executed


def test_audit_work_grows_linearly_with_the_number_of_tensors():
    """Counted, not timed, so no load can fail it: 8x the layers (7.8x the tensors) may
    cost at most 1.25x that many lines executed. Work quadratic in the tensors (a list
    searched per tensor) would cost about 60x."""
    small, big = _meta_transformer(4), _meta_transformer(32)
    tensors = len(utils.where(big)) / len(utils.where(small))
    work = (_python_lines_executed(lambda: utils.audit(big, "cpu"))
            / _python_lines_executed(lambda: utils.audit(small, "cpu")))
    assert work < 1.25 * tensors, f"{tensors:.1f}x the tensors cost {work:.1f}x the work"


def test_audit_of_a_44m_parameter_transformer_takes_well_under_a_second():
    """A generous bound (about 10 ms on a quiet 2-core machine; 80x headroom for a loaded
    one): only a real defect, such as reading tensor data, fails it.
    tools/bench/benchmark_audit.py prints the real figures."""
    model = _meta_transformer(6)  # nn.Transformer()'s defaults: 44M parameters
    assert sum(p.numel() for p in model.parameters()) > 44_000_000
    median = _median_seconds_interleaved({"audit": lambda: utils.audit(model, "cpu")})["audit"]
    assert median < 1.0, f"median {median:.4f} s"


# ------------------------------------------------ review 03/04: false findings and misses


class AlsoInAList(nn.Module):
    """Registered modules that are also kept in plain lists (a common convenience)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(2, 2)
        self.body = nn.Sequential(nn.Linear(2, 2))
        self.all = [self.enc]
        self.first = [self.body[0]]


@pytest.mark.parametrize("moved", [False, True])
def test_a_registered_module_also_in_a_plain_list_is_not_a_finding(moved):
    model = AlsoInAList().to("meta") if moved else AlsoInAList()
    rows = {p.name: p for p in utils.where(model)}
    assert rows["enc.weight"].kind == placement.PARAMETER and rows["enc.weight"].moved_by_to
    assert rows["body.0.bias"].moved_by_to
    assert not any("plain list" in p.kind for p in rows.values())
    findings = utils.audit(model, "meta")
    assert all(f.moved_by_to for f in findings), [str(f) for f in findings]
    assert len(findings) == (0 if moved else 4)


class BufferAlias(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(2))
        self.masks = [self.mask]  # Module._apply replaces buffer objects: this one stays
        self.linear = nn.Linear(2, 2)
        self.weights = [self.linear.weight]  # param.data is swapped in place on CUDA


def test_a_buffer_kept_in_a_list_is_left_behind_before_and_after_the_move():
    before = {f.name: f for f in utils.audit(BufferAlias(), "cuda:0")}
    assert not before["masks.0"].moved_by_to
    assert "replaces" in str(before["masks.0"])
    assert "weights.0" not in before  # a parameter alias follows the move on a GPU
    after = utils.audit(BufferAlias().to("meta"), "meta")
    assert "masks.0" in {f.name for f in after}
    assert utils.where(BufferAlias()).left_behind()[0].name == "masks.0"


@pytest.mark.parametrize("apply", ["weight_norm", "spectral_norm", "prune"])
def test_a_weight_recomputed_by_a_pre_hook_is_not_a_finding(apply):
    layer = nn.Linear(3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm is deprecated
        if apply == "prune":
            torch.nn.utils.prune.l1_unstructured(layer, "weight", 0.5)
        else:
            getattr(torch.nn.utils, apply)(layer)
    assert utils.audit(layer.to("meta"), "meta") == []
    row = {p.name: p for p in utils.where(layer)}["weight"]
    assert row.kind == placement.RECOMPUTED and "register_buffer" not in row.kind


def test_a_cpu_index_in_the_target_means_the_cpu():
    findings = utils.audit(nn.Linear(2, 2), "cpu:0")
    assert findings == [] and findings.target == torch.device("cpu")


class Containers(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = (torch.ones(1), torch.ones(1))
        self.unique = {torch.ones(1)}
        self.layers = (nn.Linear(1, 1),)


def test_tensors_in_tuples_and_sets_are_found_and_named_for_what_holds_them():
    kinds = _kinds(utils.where(Containers().to("meta")))
    assert kinds["pair.0"] == (placement.IN_TUPLE, False)
    assert kinds["unique.0"] == (placement.IN_SET, False)
    assert kinds["layers.0.weight"] == ("parameter of a module in a plain tuple", False)
    messages = {f.name: str(f) for f in utils.audit(Containers(), "meta")}
    assert "nn.ModuleList" in messages["layers.0.bias"]
    assert "tensor in a set" in messages["unique.0"]


def test_where_stops_at_a_cycle():
    cyclic = [torch.ones(1)]
    cyclic.append(cyclic)
    table = utils.where({"batch": cyclic, "again": cyclic})
    assert [p.name for p in table] == ["batch.0"]

    class Loop(nn.Module):
        def __init__(self):
            super().__init__()
            self.state = {"x": torch.ones(1)}
            self.state["self"] = self.state
    assert [p.name for p in utils.where(Loop())] == ["state.x"]


def test_where_lists_a_module_s_registered_tensors_before_its_stragglers():
    names = [p.name for p in utils.where(Block())]
    assert names.index("running") < names.index("linear.weight") < names.index("scale")
    assert names[-1] == "experts.a.bias"  # what Module.to does not see comes last


def test_placement_figure_collapses_clean_subtrees_and_draws_stragglers():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1,
                               num_decoder_layers=1, dim_feedforward=8).to("meta")
    model.extra = torch.ones(1)
    figure = utils.placement_figure(model, "meta")
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert not any("more rows" in t for t in texts)
    assert any(t.startswith("encoder/") and "all on meta" in t for t in texts)
    assert "extra  [cpu]" in texts
    clean = utils.placement_figure(nn.Linear(2, 2).to("meta"), "meta")
    labels = [t.get_text() for t in clean.axes[0].get_legend().get_texts()]
    assert "left behind by .to" not in labels


def test_tied_weights_and_nested_dicts_come_out_right():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight
            self.config = {"nested": {"x": [torch.zeros(1)]}}

    findings = utils.audit(Tied().to("meta"), "meta")
    assert [f.name for f in findings] == ["config.nested.x.0"]
