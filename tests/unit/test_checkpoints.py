"""utils.checkpoints: inspect without loading, fake locations, prefixes, bad and hostile files."""

from __future__ import annotations

import builtins
import os
import pickle
import zipfile

import pytest
import torch
from torch import nn

import utils


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty working folder; hostile payloads would write their marker file here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _training_checkpoint() -> dict:
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 2)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}


# --- inspect_checkpoint -----------------------------------------------------------------


def test_inspect_lists_key_paths_shapes_dtypes_and_locations(folder):
    torch.save(_training_checkpoint(), "run.pt")
    info = utils.inspect_checkpoint("run.pt")
    rows = {entry.key: entry for entry in info.entries}
    assert info.format == "zip" and info.locations == {"cpu"}
    assert rows["model/0.weight"].shape == (3, 2)
    assert rows["model/1.num_batches_tracked"].dtype == torch.int64
    assert rows["optimizer/state/0/exp_avg"].shape == (3, 2)
    assert info.file_bytes == os.path.getsize("run.pt")


def test_inspect_reads_the_tag_of_a_file_saved_as_if_on_a_gpu(folder):
    utils.save_as_if_on(nn.Linear(2, 3).state_dict(), "gpu.pt", "cuda:0")
    info = utils.inspect_checkpoint("gpu.pt")
    assert info.locations == {"cuda:0"}
    assert [e.key for e in info.entries] == ["weight", "bias"]


@pytest.mark.parametrize("tag", ["cuda:0", "cuda:1", "mps"])
def test_inspect_finds_each_pretend_location(folder, tag):
    utils.save_as_if_on({"w": torch.ones(2)}, "f.pt", tag)
    assert utils.inspect_checkpoint("f.pt").locations == {tag}


def test_inspect_reads_legacy_format_and_views(folder):
    weights = torch.randn(3, 4)
    torch.save({"w": weights, "row": weights[1]}, "old.pt", _use_new_zipfile_serialization=False)
    info = utils.inspect_checkpoint("old.pt")
    assert info.format == "legacy"
    assert [(e.key, e.shape, e.location) for e in info.entries] == [
        ("w", (3, 4), "cpu"), ("row", (4,), "cpu")]



def test_inspect_shows_the_whole_storage_a_view_saves_and_counts_it_once(folder):
    big = torch.zeros(1024, 256)  # 1 MiB
    torch.save({"head": big[:2], "again": big[:2]}, "view.pt")
    info = utils.inspect_checkpoint("view.pt")
    head, again = info.entries
    assert head.nbytes == 2 * 256 * 4 and head.storage_bytes == 2**20 and not head.shared
    assert again.shared and info.storage_bytes == 2**20  # one storage, counted once
    assert "1.0 MiB" in str(info) and "shared" in str(info)
    torch.save({"head": big[:2].clone()}, "clone.pt")
    assert utils.inspect_checkpoint("clone.pt").storage_bytes == 2 * 256 * 4


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_inspect_lists_sparse_tensors_instead_of_crashing(folder):
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,), check_invariants=True)
    torch.save({"s": sparse, "csr": torch.eye(3).to_sparse_csr(), "d": torch.ones(2)}, "sp.pt")
    rows = {e.key: e for e in utils.inspect_checkpoint("sp.pt").entries}
    assert rows["s"].location == "cpu (sparse)" and rows["s"].shape == (4,)
    assert rows["csr"].location == "cpu (sparse)" and rows["d"].location == "cpu"


def test_a_key_with_a_slash_is_told_apart_from_a_nested_key(folder):
    torch.save({"a/b": torch.ones(1), "a": {"b": torch.zeros(1)}}, "keys.pt")
    keys = [e.key for e in utils.inspect_checkpoint("keys.pt").entries]
    assert keys == ["'a/b'", "a/b"]

def test_inspect_says_a_meta_tensor_saves_no_data(folder):
    torch.save({"m": torch.empty(3, device="meta")}, "meta.pt")
    (entry,) = utils.inspect_checkpoint("meta.pt").entries
    assert entry.location == "meta (no data saved)" and entry.storage_bytes == 0


@pytest.mark.filterwarnings("ignore:Detected pickle protocol 4")
def test_a_legacy_file_with_pickle_protocol_4_is_named_as_such(folder):
    """PyTorch's safe loader cannot read it (FRAME, opcode 149): say so, not 'not a
    checkpoint'."""
    torch.save({"w": torch.ones(2)}, "p4.pt", pickle_protocol=4,
               _use_new_zipfile_serialization=False)
    with pytest.raises(utils.CheckpointError, match="legacy-format torch.save checkpoint "
                       "written with pickle protocol 4"):
        utils.inspect_checkpoint("p4.pt")


def test_a_zip_with_data_pkl_but_no_version_was_not_written_by_torch_save(folder):
    with zipfile.ZipFile("odd.pt", "w") as archive:
        archive.writestr("odd/data.pkl", pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(utils.CheckpointError, match="not written by torch.save"):
        utils.inspect_checkpoint("odd.pt")

def test_inspect_renders_as_text_and_html(folder):
    utils.save_as_if_on({"layer": {"weight": torch.zeros(2, 2)}}, "f.pt", "cuda:0")
    info = utils.inspect_checkpoint("f.pt")
    assert "layer/weight" in str(info) and "cuda:0" in str(info)
    assert "<table>" in info._repr_html_() and "<td>cuda:0</td>" in info._repr_html_()


def test_inspect_of_a_bare_tensor_names_it(folder):
    torch.save(torch.arange(3), "t.pt")
    (entry,) = utils.inspect_checkpoint("t.pt").entries
    assert entry.key == "(the saved object)" and entry.dtype == torch.int64


def test_a_cuda_tagged_file_gives_pytorchs_genuine_error_on_a_cpu_only_machine(folder):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the file loads there")
    utils.save_as_if_on({"w": torch.ones(2)}, "gpu.pt", "cuda:0")
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        torch.load("gpu.pt")
    assert torch.load("gpu.pt", map_location="cpu")["w"].device == torch.device("cpu")


def test_save_as_if_on_leaves_normal_saves_alone(folder):
    utils.save_as_if_on({"w": torch.ones(2)}, "gpu.pt", "cuda:0")
    torch.save({"w": torch.ones(2)}, "cpu.pt")
    assert utils.inspect_checkpoint("cpu.pt").locations == {"cpu"}


def test_save_as_if_on_rejects_a_made_up_device(folder):
    with pytest.raises(ValueError, match="'cuda:0'"):
        utils.save_as_if_on({}, "f.pt", "gpu0")


# --- broken input -----------------------------------------------------------------------


def test_missing_file_lists_the_checkpoints_that_are_there(folder):
    torch.save({}, "real.pt")
    with pytest.raises(FileNotFoundError, match="real.pt"):
        utils.inspect_checkpoint("typo.pt")


def test_a_folder_is_not_a_checkpoint(folder):
    (folder / "run").mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder"):
        utils.inspect_checkpoint("run")


def test_empty_file(folder):
    (folder / "empty.pt").write_bytes(b"")
    with pytest.raises(utils.CheckpointError, match="empty"):
        utils.inspect_checkpoint("empty.pt")


@pytest.mark.parametrize("legacy", [False, True])
def test_truncated_file(folder, legacy):
    torch.save({"w": torch.randn(500)}, "full.pt", _use_new_zipfile_serialization=not legacy)
    data = (folder / "full.pt").read_bytes()
    (folder / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(utils.CheckpointError, match="truncated"):
        utils.inspect_checkpoint("cut.pt")


def test_a_zip_that_is_not_a_checkpoint(folder):
    with zipfile.ZipFile("notes.zip", "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(utils.CheckpointError, match="without data.pkl"):
        utils.inspect_checkpoint("notes.zip")


def test_a_text_file(folder):
    (folder / "notes.pt").write_text("epoch 3, loss 0.1\n")
    with pytest.raises(utils.CheckpointError, match="text file starting with 'epoch 3"):
        utils.inspect_checkpoint("notes.pt")


# --- hostile input: the payload never runs ---------------------------------------------

MARKER = "payload_ran.txt"


class CallsOsSystem:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


class CallsEval:
    def __reduce__(self):
        return (eval, (f"open({MARKER!r}, 'w').close()",))


class CallsExec:
    def __reduce__(self):
        return (exec, (f"open({MARKER!r}, 'w').close()",))


# GLOBAL builtins.open, called with (MARKER, 'w'): written by hand, protocol 0.
BUILTINS_GLOBAL_PICKLE = f"cbuiltins\nopen\n(V{MARKER}\nVw\ntR.".encode()
HOSTILE = [CallsOsSystem(), CallsEval(), CallsExec()]
HOSTILE_IDS = ["os.system", "eval", "exec"]


def test_the_payloads_are_live(folder):
    """Control: plain pickle.load does run each payload, so an absent marker means something."""
    for payload in [*[pickle.dumps(p) for p in HOSTILE], BUILTINS_GLOBAL_PICKLE]:
        pickle.loads(payload)
        assert os.path.exists(MARKER)
        os.remove(MARKER)


@pytest.mark.parametrize("payload", HOSTILE, ids=HOSTILE_IDS)
@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_hostile_reduce_is_refused_and_never_runs(folder, payload, zip_format):
    torch.save(payload, "evil.pt", _use_new_zipfile_serialization=zip_format)
    with pytest.raises(utils.UnsafeCheckpointError, match="Nothing in it was executed"):
        utils.inspect_checkpoint("evil.pt")
    assert not os.path.exists(MARKER)


def test_global_of_builtins_in_a_crafted_data_pkl_is_refused(folder):
    torch.save({"w": torch.ones(1)}, "crafted.pt")
    with zipfile.ZipFile("crafted.pt") as archive:
        records = {name: archive.read(name) for name in archive.namelist()}
    data_pkl = next(name for name in records if name.endswith("/data.pkl"))
    records[data_pkl] = BUILTINS_GLOBAL_PICKLE
    with zipfile.ZipFile("crafted.pt", "w") as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    with pytest.raises(utils.UnsafeCheckpointError, match="open"):
        utils.inspect_checkpoint("crafted.pt")
    assert not os.path.exists(MARKER)


def test_a_plain_hostile_pickle_is_refused_before_unpickling(folder, monkeypatch):
    (folder / "model.pt").write_bytes(pickle.dumps(CallsOsSystem()))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was reached"))
    with pytest.raises(utils.CheckpointError, match="plain pickle"):
        utils.inspect_checkpoint("model.pt")
    assert not os.path.exists(MARKER)


def test_a_whole_pickled_module_is_refused_with_its_class_named(folder):
    torch.save(nn.Linear(2, 2), "whole.pt")
    with pytest.raises(utils.UnsafeCheckpointError, match="torch.nn.modules.linear.Linear"):
        utils.inspect_checkpoint("whole.pt")


def _refused(path) -> utils.UnsafeCheckpointError:
    with pytest.raises(utils.UnsafeCheckpointError) as caught:
        utils.inspect_checkpoint(path)
    return caught.value


def test_a_refused_whole_model_still_shows_its_tensors_and_tags(folder):
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    torch.save(model, "whole.pt")
    error = _refused("whole.pt")
    assert error.needs == ["torch.nn.modules.batchnorm.BatchNorm1d",
                           "torch.nn.modules.container.Sequential",
                           "torch.nn.modules.linear.Linear"]
    rows = [(e.key, e.shape, e.dtype, e.location) for e in error.info.entries]
    assert rows == [(key, tuple(t.shape), t.dtype, "cpu") for key, t in
                    ((k.replace(".", "/"), t) for k, t in model.state_dict().items())]
    assert "7 tensor(s) in 72 bytes of storage, saved location tag(s): cpu" in str(error.info)
    assert "it needs torch.nn.modules.batchnorm.BatchNorm1d" in error.info.summary()


@pytest.mark.parametrize("tag", ["cuda:0", "cuda:1", "mps"])
def test_a_refused_whole_model_saved_on_an_accelerator_shows_that_tag(folder, tag):
    utils.save_as_if_on(nn.Linear(3, 2), "whole.pt", tag)
    error = _refused("whole.pt")
    assert error.info.locations == {tag}
    assert f"saved location tag(s): {tag}" in str(error.info)


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_a_refused_lightning_style_checkpoint_lists_its_state_dict(folder, zip_format):
    import argparse
    model = nn.Linear(3, 2)
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": argparse.Namespace(lr=1),
                "epoch": 3}, "lightning.ckpt", _use_new_zipfile_serialization=zip_format)
    error = _refused("lightning.ckpt")
    assert error.needs == ["argparse.Namespace"]
    assert [(e.key, e.shape) for e in error.info.entries] == [
        ("state_dict/weight", (2, 3)), ("state_dict/bias", (2,))]
    assert error.info.storage_bytes == (6 + 2) * 4


def test_a_refused_numpy_scalar_still_shows_the_tensors_around_it(folder):
    np = pytest.importorskip("numpy")
    torch.save({"weight": torch.ones(4, dtype=torch.float16), "best": np.float64(0.5)},
               "with_numpy.pt")
    error = _refused("with_numpy.pt")
    assert any(name.startswith("numpy") for name in error.needs)
    [entry] = error.info.entries
    assert (entry.key, entry.shape, entry.dtype, entry.nbytes) == (
        "weight", (4,), torch.float16, 8)


def test_a_refused_file_shows_views_shared_storages_and_meta_tensors(folder):
    import argparse
    base = torch.zeros(10)
    torch.save(argparse.Namespace(a=base[:2], b=base[5:], m=torch.empty(3, device="meta")),
               "views.pt")
    entries = {e.key: e for e in _refused("views.pt").info.entries}
    assert entries["a"].storage_bytes == 40 and not entries["a"].shared
    assert entries["b"].shared and entries["b"].shape == (5,)
    assert entries["m"].location.startswith("meta") and entries["m"].storage_bytes == 0


@pytest.mark.parametrize("payload", HOSTILE, ids=HOSTILE_IDS)
def test_reading_the_contents_of_a_hostile_file_runs_nothing(folder, payload):
    torch.save({"weight": torch.ones(2), "surprise": payload}, "evil.pt")
    error = _refused("evil.pt")
    assert not os.path.exists(MARKER)
    if any(n.startswith(("posix.", "nt.", "os.")) for n in error.needs):
        assert error.info is None  # PyTorch's loader blocks these modules even as stand-ins
    else:
        assert [e.key for e in error.info.entries] == ["weight"]


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_refused_file_shows_its_tensors_in_the_protocols_the_safe_loader_reads(folder,
                                                                                 protocol):
    model = nn.Linear(3, 2)
    torch.save({"model": model}, "whole.pt", pickle_protocol=protocol)
    info = _refused("whole.pt").info
    assert [(e.key, e.shape, e.dtype, e.location) for e in info.entries] == [
        ("model/weight", (2, 3), torch.float32, "cpu"), ("model/bias", (2,), torch.float32, "cpu")]


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_whole_model_in_a_protocol_the_safe_loader_cannot_read_is_refused_as_unreadable(
        folder, protocol):
    """PyTorch's safe loader stops at protocol 4's FRAME opcode, before any global."""
    torch.save({"model": nn.Linear(3, 2)}, "whole.pt", pickle_protocol=protocol)
    with pytest.raises(utils.CheckpointError, match="pickle operations the safe loader refuses"):
        utils.inspect_checkpoint("whole.pt")


def test_a_damaged_refused_file_still_refuses_with_no_info(folder):
    torch.save({"w": torch.ones(1)}, "crafted.pt")
    with zipfile.ZipFile("crafted.pt") as archive:
        records = {name: archive.read(name) for name in archive.namelist()}
    data_pkl = next(name for name in records if name.endswith("/data.pkl"))
    records[data_pkl] = BUILTINS_GLOBAL_PICKLE[:-1]  # no STOP: truncated
    with zipfile.ZipFile("crafted.pt", "w") as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    with pytest.raises(utils.CheckpointError) as caught:
        utils.inspect_checkpoint("crafted.pt")
    assert getattr(caught.value, "info", None) is None
    assert not os.path.exists(MARKER)


def test_cleaned_error_drops_ansi_escapes(folder):
    torch.save(CallsEval(), "evil.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(pickle.UnpicklingError) as caught:
        torch.load("evil.pt")
    assert "\x1b[" in str(caught.value)  # PyTorch's own message is coloured
    cleaned = utils.cleaned_error(caught.value)
    assert cleaned.startswith("UnpicklingError: Weights only load failed")
    assert "\x1b" not in cleaned and "\n" not in cleaned
    assert builtins.eval is eval and not os.path.exists(MARKER)


# --- atomic save ------------------------------------------------------------------------


def test_save_atomic_writes_a_loadable_file_and_no_temporary_left(folder):
    utils.save_atomic({"w": torch.ones(3)}, "ckpt.pt")
    assert torch.equal(torch.load("ckpt.pt")["w"], torch.ones(3))
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt.pt"]


def test_save_atomic_failure_keeps_the_old_file_and_cleans_up(folder):
    utils.save_atomic({"generation": 1}, "ckpt.pt")
    with pytest.raises((pickle.PicklingError, AttributeError)):  # a lambda cannot be pickled
        utils.save_atomic({"bad": lambda: None}, "ckpt.pt")
    assert torch.load("ckpt.pt") == {"generation": 1}
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt.pt"]


def test_save_atomic_gives_the_file_the_mode_torch_save_would(folder):
    old_mask = os.umask(0o022)
    try:
        torch.save({}, "plain.pt")
        utils.save_atomic({}, "atomic.pt")
    finally:
        os.umask(old_mask)
    assert (folder / "plain.pt").stat().st_mode & 0o777 == 0o644
    assert (folder / "atomic.pt").stat().st_mode & 0o777 == 0o644


class _FailsMidSave:
    def __reduce__(self):
        raise RuntimeError("the process dies here, halfway through the pickle")


def test_save_atomic_failing_halfway_keeps_the_old_file(folder):
    utils.save_atomic({"generation": 1}, "ckpt.pt")
    with pytest.raises(RuntimeError, match="halfway"):
        utils.save_atomic({"w": torch.ones(1000), "z": _FailsMidSave()}, "ckpt.pt")
    assert torch.load("ckpt.pt") == {"generation": 1}
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt.pt"]


def test_save_atomic_into_a_missing_folder_says_so(folder):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        utils.save_atomic({}, "no_such_folder/ckpt.pt")


# --- prefixes ---------------------------------------------------------------------------


def test_strip_prefix_removes_only_the_leading_prefix():
    state = {"module.encoder.module.w": 1, "module.b": 2}
    assert dict(utils.strip_prefix(state, "module.")) == {"encoder.module.w": 1, "b": 2}
    assert "module.b" in state  # the input is untouched


def test_strip_prefix_keeps_metadata_for_load_state_dict():
    model = nn.BatchNorm1d(3)
    wrapped = utils.add_prefix(model.state_dict(), "module.")
    wrapped._metadata = {"module": model.state_dict()._metadata[""]}
    stripped = utils.strip_prefix(wrapped, "module.")
    assert "" in stripped._metadata
    assert not nn.BatchNorm1d(3).load_state_dict(stripped).missing_keys


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod.", "_orig_mod.module.",
                                    "module._orig_mod."])
def test_strip_wrapper_prefixes_undoes_ddp_and_compile(prefix):
    state = utils.add_prefix(nn.Linear(2, 2).state_dict(), prefix)
    assert list(utils.strip_wrapper_prefixes(state)) == ["weight", "bias"]


def test_strip_wrapper_prefixes_keeps_a_layer_named_module():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.module = nn.Linear(4, 2)

    wrapped = nn.DataParallel(Block()).state_dict()
    assert list(wrapped) == ["module.module.weight", "module.module.bias"]
    assert list(utils.strip_wrapper_prefixes(wrapped)) == ["module.weight", "module.bias"]
    Block().load_state_dict(utils.strip_wrapper_prefixes(wrapped))
    twice = nn.DataParallel(nn.DataParallel(Block())).state_dict()  # module.module.module.
    assert list(utils.strip_wrapper_prefixes(twice, Block())) == ["module.weight", "module.bias"]


def test_strip_wrapper_prefixes_stops_once_the_target_keys_match():
    state = utils.add_prefix(nn.Linear(2, 2).state_dict(), "_orig_mod.module.")
    target = utils.add_prefix(nn.Linear(2, 2).state_dict(), "module.")
    assert list(utils.strip_wrapper_prefixes(state, target)) == list(target)


def test_strip_wrapper_prefixes_leaves_mixed_keys_alone():
    state = {"module.w": 1, "b": 2}
    assert dict(utils.strip_wrapper_prefixes(state)) == state


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, imported by compile
def test_torch_compile_prefixes_keys_with_orig_mod_and_module_compile_does_not():
    """What notebook 06 states without calling torch.compile (its set-up takes seconds)."""
    model = nn.Linear(2, 2)
    assert list(torch.compile(model).state_dict()) == ["_orig_mod.weight", "_orig_mod.bias"]
    model.compile()  # in place: no wrapper, no prefix
    assert list(model.state_dict()) == ["weight", "bias"]
    assert list(utils.strip_wrapper_prefixes(torch.compile(model).state_dict())) == [
        "weight", "bias"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, imported by compile
def test_torch_compile_compiles_again_after_the_model_moves():
    """Notebook 06: a compiled model specialises on its first device (backend eager: fast)."""
    from torch._dynamo.utils import counters

    model = nn.Linear(2, 2)
    compiled = torch.compile(model, backend="eager")
    counters.clear()
    compiled(torch.ones(1, 2))
    compiled(torch.ones(1, 2))  # same device, same dtype: the same graph
    assert counters["stats"]["unique_graphs"] == 1
    model.to("meta")  # moved: its guards fail, so it compiles again
    compiled(torch.ones(1, 2, device="meta"))
    assert counters["stats"]["unique_graphs"] == 2
