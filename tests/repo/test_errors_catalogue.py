"""The error index (docs/errors.toml -> docs/errors.md) holds only messages someone saw.

Every message (and older wording) is printed by a stored output of a notebook or lab, quoted in
one of their cells, recorded from a real GPU run in docs/gpu-verification.md, or has a `quoted`
source: PyTorch's source file, a run recorded in tests/data/error_runs.toml (run again here), or
a user's report in tests/data/error_reports.toml. Every link points to a notebook heading that
exists (or to a notebook another branch adds this round); every section whose stored outputs
raise a device or checkpoint error is in the index; every cause has a fix a reader can paste.
"""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

import nbformat
import pytest

from tools import build_errors, lessons, reading_time

ENTRIES = build_errors.catalogue()
DATA = lessons.ROOT / "tests" / "data"
RUNS = {run["id"]: run for run in tomllib.loads(
    (DATA / "error_runs.toml").read_text(encoding="utf-8"))["run"]}
REPORTS = {report["url"]: report for report in tomllib.loads(
    (DATA / "error_reports.toml").read_text(encoding="utf-8"))["report"]}

#: Notebooks other branches add this round (the libraries notebook, and 08_many_devices split
#: in two): the index may link to them before they exist here; once they do, their headings are
#: checked.
PLANNED = {"notebooks/08_libraries.ipynb", "notebooks/09_many_processes.ipynb",
           "notebooks/10_sharded_training.ipynb"}
#: Notebooks being replaced this round, whose sections the index no longer links to, and why.
REPLACED = {"notebooks/08_many_devices.ipynb": "split into 09_many_processes and "
            "10_sharded_training; the index links there"}
RECORD = lessons.ROOT / "docs" / "gpu-verification.md"
RECORD_PRINTED = "## Quoted messages, as the GPU printed them"

#: Sections whose stored outputs raise an error the index leaves out, and why.
NOT_IN_THE_INDEX: dict[tuple[str, str], str] = {}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def normalized(text: str) -> str:
    """Text as a reader compares it: no terminal colours, every run of whitespace one space."""
    return " ".join(_ANSI.sub("", text).split())


def notebook_paths() -> list[Path]:
    return lessons.lesson_notebooks() + lessons.student_labs() + lessons.solution_labs()


def _output_texts(output: dict) -> list[str]:
    if output["output_type"] == "stream":
        return [output["text"]]
    if output["output_type"] == "error":
        return [f"{output['ename']}: {output['evalue']}"]
    data = output.get("data", {})
    return [data["text/plain"]] if "text/plain" in data else []


def _texts() -> list[str]:
    """Every cell source and stored output of the collection, and each record paragraph."""
    found = []
    for path in notebook_paths():
        for cell in nbformat.read(path, as_version=4).cells:
            found.append(cell.source)
            for output in cell.get("outputs", []):
                found += _output_texts(output)
    # From the record, only what the GPU printed (its table), not the wrong quotes it lists.
    record = RECORD.read_text(encoding="utf-8")
    printed = record.split(RECORD_PRINTED, 1)[1].split("\n## ", 1)[0]
    found += printed.splitlines()
    return [normalized(text) for text in found]


TEXTS = _texts()


def seen(message: str, texts: list[str] = TEXTS) -> bool:
    """Whether ``message`` ("a ... b": the pieces in order) is in one of ``texts``."""
    pieces = [normalized(piece) for piece in message.split(" ... ")]
    for text in texts:
        start = 0
        for piece in pieces:
            start = text.find(piece, start)
            if start < 0:
                break
            start += len(piece)
        else:
            return True
    return False


def _messages():
    for entry in ENTRIES:
        sources = {item["text"]: item["source"] for item in build_errors.quoted(entry)}
        for message in entry.get("messages", []) + entry.get("older_wordings", []):
            yield pytest.param(message, sources.get(message), id=f"{entry['id']}:{message[:40]}")


def run_printed(code: str) -> str:
    """What a recorded run prints: its output, or its exception as "Name: first line"."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(code, {"torch": __import__("torch"), "nn": __import__("torch").nn})  # noqa: S102
    except Exception as error:  # noqa: BLE001 - the run's error is what it recorded
        return f"{type(error).__name__}: {error}".splitlines()[0]
    return printed.getvalue().strip()


def quoted_source_shows(message: str, source: str) -> bool:
    """Whether a ``quoted`` source backs ``message``: a recorded run or a corpus report that
    shows it, or a PyTorch source path (checked by hand with the search tools; see the report)."""
    kind, _, value = source.partition(":")
    if kind == "run":
        return value in RUNS and seen(message, [normalized(RUNS[value]["printed"])])
    if kind == "report":
        return value in REPORTS and seen(message, [normalized(REPORTS[value]["message"])])
    return kind == "pytorch" and re.fullmatch(r"(aten|c10|torch)/[\w/.]+\.\w+", value) is not None


@pytest.mark.parametrize(("message", "source"), list(_messages()))
def test_every_message_is_one_a_notebook_prints_or_quotes_or_a_gpu_run_recorded(message, source):
    assert seen(message) or (source and quoted_source_shows(message, source)), (
        f"no notebook, lab, GPU record, recorded run, report or source shows {message!r}: "
        "never invent one")


@pytest.mark.parametrize("run", list(RUNS.values()), ids=list(RUNS))
def test_every_recorded_run_still_prints_what_it_recorded(run):
    import torch

    if run.get("build") == "cpu" and torch.version.cuda is not None:
        pytest.skip("recorded on a CPU-only build; this torch is a CUDA build")
    assert run_printed(run["code"]) == run["printed"]


def test_a_quoted_source_that_does_not_show_the_message_is_refused():
    some_url = next(iter(REPORTS))
    assert not quoted_source_shows("RuntimeError: not this message", f"report:{some_url}")
    assert not quoted_source_shows("IndexError: index out of range in self", "run:no-such-run")
    assert not quoted_source_shows("x", "pytorch:README.md")
    assert not quoted_source_shows("x", "a blog:somewhere")


def test_an_invented_message_is_not_seen():
    assert not seen("RuntimeError: Expected all tensors to be on the same planet")
    assert seen("Expected all tensors ... cuda:0 and cpu!")
    assert not seen("cuda:0 and cpu! ... Expected all tensors",
                    ["Expected all tensors, cuda:0 and cpu!"])


def _headings(path: Path) -> list[str]:
    return [text for cell in nbformat.read(path, as_version=4).cells
            if cell.cell_type == "markdown"
            for _, text in reading_time.headings(cell.source)]


def test_every_link_points_to_a_notebook_and_a_heading_that_exist():
    for entry in ENTRIES:
        assert entry["where"], f"{entry['id']}: say where it happens"
        for where in entry["where"]:
            path = lessons.ROOT / where["notebook"]
            if not path.exists() and where["notebook"] in PLANNED:
                continue  # added by another branch this round: checked once it is here
            assert path.exists(), f"{entry['id']}: no notebook {where['notebook']}"
            assert "heading" not in where or where["heading"] in _headings(path), (
                f"{entry['id']}: {where['notebook']} has no heading {where['heading']!r}")


def test_links_use_the_anchor_jupyterlab_gives_a_heading():
    assert build_errors.anchor("4. Cause: a tensor made inside `forward` without `device=`") == (
        "4.-Cause:-a-tensor-made-inside-forward-without-device=")
    assert build_errors.anchor("Going deeper: `CUDA_VISIBLE_DEVICES` live, and `mp.spawn` "
                               "from a notebook") == (
        "Going-deeper:-CUDA_VISIBLE_DEVICES-live,-and-mp.spawn-from-a-notebook")
    assert build_errors.anchor("A (b)") == "A-%28b%29"
    page = (lessons.ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    link = "../notebooks/05_save_load_scenarios.ipynb#Scenario-1:-saved-on-a-GPU,-loaded-on-a-CPU"
    assert f"({link})" in page


def _raised_errors():
    """(notebook, section heading, error text) for every error a stored output raises or prints."""
    exception_line = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception): .+", re.MULTILINE)
    for path in lessons.lesson_notebooks() + lessons.solution_labs():
        if path.relative_to(lessons.ROOT).as_posix() in REPLACED:
            continue
        heading = None
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                found = reading_time.headings(cell.source)
                heading = found[-1][1] if found else heading
                continue
            for output in cell.get("outputs", []):
                if output["output_type"] == "error":
                    texts = [f"{output['ename']}: {output['evalue']}"]
                elif output["output_type"] == "stream":
                    texts = [match.group(0) for match in exception_line.finditer(output["text"])]
                else:
                    texts = []
                for text in texts:
                    yield path.relative_to(lessons.ROOT).as_posix(), heading, normalized(text)


def _core(message: str) -> str:
    """A message without its exception name, cut to its stable start."""
    return re.sub(r"^(?:[\w.]+(?:Error|Exception): )", "", normalized(message))[:30]


def test_every_section_whose_outputs_raise_a_device_or_checkpoint_error_is_in_the_index():
    missing = []
    for notebook, heading, text in _raised_errors():
        if (notebook, heading) in NOT_IN_THE_INDEX:
            continue
        listed = any(
            where["notebook"] == notebook and where.get("heading") == heading
            and any(_core(message) in text for message in entry.get("messages", []))
            for entry in ENTRIES for where in entry["where"])
        if not listed:
            missing.append(f"{notebook} § {heading}: {text[:100]}")
    assert not missing, ("sections that raise an error the index does not list (add an entry or "
                         "a `where`, or an exclusion with its reason):\n" + "\n".join(missing))


def test_every_link_inside_the_page_points_to_an_entry_it_shows():
    page = (lessons.ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    targets = set(re.findall(r"\]\(#([a-z0-9-]+)\)", page))
    shown = {entry["id"] for entry in ENTRIES if build_errors.shown(entry)}
    # A link may also go to a place inside an entry (a cause, a split model's route): an anchor
    # the page defines once, on a line of its own, named after the entry it is in.
    defined = re.findall(r'^<a id="([a-z0-9-]+)"></a>$', page, re.MULTILINE)
    assert len(defined) == len(set(defined)), "each anchor once"
    inside = {name for name in defined if any(name.startswith(f"{id_}-") for id_ in shown)}
    page_anchors = build_errors.PAGE_ANCHORS
    assert page_anchors <= set(defined)
    first_entry_at = page.index(f'<a id="{ENTRIES[0]["id"]}"></a>')
    assert all(page.index(f'<a id="{name}"></a>') < first_entry_at for name in page_anchors)
    assert targets and not targets - shown - inside - page_anchors, (
        f"links to entries not shown: {targets - shown - inside - page_anchors}")
    for name in inside:  # the anchor is inside its own entry
        owner = max((id_ for id_ in shown if name.startswith(f"{id_}-")), key=len)
        entry_at = page.index(f'<a id="{owner}"></a>')
        anchor_at = page.index(f'<a id="{name}"></a>')
        assert entry_at < anchor_at and page[entry_at:anchor_at].count("\n## ") == 1, name


def test_the_index_is_generated_from_the_catalogue():
    assert build_errors.stale() is None, "docs/errors.md is out of date: run `make nav`"


def test_each_entry_has_an_id_a_title_causes_and_a_fix():
    ids = [entry["id"] for entry in ENTRIES]
    assert len(ids) == len(set(ids))
    for entry in ENTRIES:
        assert re.fullmatch(r"[a-z0-9-]+", entry["id"]), entry["id"]
        assert entry["title"] and build_errors.causes(entry), entry["id"]
        assert entry.get("messages") or entry.get("symptom"), entry["id"]


def test_every_cause_has_its_own_fix_to_paste():
    found = {entry["id"]: build_errors.problems(entry) for entry in ENTRIES}
    assert not {name: wrong for name, wrong in found.items() if wrong}


GOOD_CAUSE = {"why": "The input was not moved.", "fix": "x = x.to(device)\n"}


@pytest.mark.parametrize(("entry", "complaint"), [
    ({"causes": ["a", "b"], "fix": "`x = x.to(device)`"}, "more than one cause sharing one fix"),
    ({"causes": ["a"]}, "no fix"),
    ({}, "no causes"),
    ({"cause": [{"why": "a", "fix": "a = 1\nb = 2\nc = 3\n"}]}, "one or two lines, not 3"),
    ({"cause": [{"why": "a", "fix": ""}]}, "one or two lines, not 0"),
    ({"cause": [{"why": "", "fix": "x = 1"}]}, "no `why`"),
    ({"cause": [{"why": "a", "fix": "```python\nx = 1\n```"}]}, "without a fence"),
    ({"cause": [{"why": "a", "fix": "safe_globals([np.dtype, ...])"}]}, "an ellipsis"),
    ({"cause": [GOOD_CAUSE], "fix": "DataLoader(..., pin_memory=True)"}, "an ellipsis"),
    ({"cause": [GOOD_CAUSE], "causes": ["a"]}, "both"),
    ({"cause": [{**GOOD_CAUSE, "footnote": "later"}]}, "cause 1: unknown keys ['footnote']"),
    ({"cause": [GOOD_CAUSE], "foot_note": "later"}, "unknown keys ['foot_note']"),
    ({"cause": [GOOD_CAUSE], "messages": ["M"],  # an entry key written under [[entry.quoted]]
      "quoted": [{"text": "M", "source": "run:x", "footnote": "lost"}]},
     "quoted: unknown keys ['footnote']"),
])
def test_a_fix_a_reader_cannot_paste_is_refused(entry, complaint):
    assert any(complaint in problem for problem in build_errors.problems(entry))


def test_a_fix_that_keeps_the_rules_passes_and_imports_do_not_count():
    with_import = {"why": "a", "fix": "from m import f\nf(state)\nmodel.load_state_dict(state)\n"}
    assert build_errors.problems({"cause": [GOOD_CAUSE, with_import]}) == []
    assert build_errors.problems({"causes": ["a"], "fix": "`x = x.to(device)`"}) == []


def test_each_cause_is_shown_with_its_fix_as_code_under_it():
    entry = {"id": "e", "title": "T", "messages": ["M"], "note": "Read it so.",
             "cause": [GOOD_CAUSE, {"why": "Hidden.", "fix": "unset X", "lang": "bash"}],
             "where": []}
    page = build_errors.render([entry])
    assert ("M\n```\n\nRead it so.\n\n**Most likely causes, and the fix for each**\n\n"
            "1. The input was not moved.\n\n   ```python\n   x = x.to(device)\n   ```\n\n"
            "2. Hidden.\n\n   ```bash\n   unset X\n   ```\n") in page


def test_the_flat_loss_entry_says_plainly_what_is_not_the_cause_on_cuda():
    (entry,) = [e for e in ENTRIES if e["id"] == "flat-loss-optimizer-before-to"]
    first = build_errors.causes(entry)[0]["why"]
    assert first.startswith("**Not the cause, on CUDA:**") and "same Parameter objects" in first


def test_the_readme_sends_a_reader_with_an_error_to_the_index_near_the_top():
    top = (lessons.ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:12]
    assert any("Got an error? Find it here: [docs/errors.md](docs/errors.md)" in line
               for line in top)


def _why_and_fix(entry_id: str) -> list[tuple[str, str]]:
    (entry,) = [e for e in ENTRIES if e["id"] == entry_id]
    return [(cause["why"], cause.get("fix", "")) for cause in build_errors.causes(entry)]


def test_the_numpy_entry_gives_the_complete_allowlists_and_the_route_for_ones_own_file():
    fixes = " ".join(fix for _, fix in _why_and_fix("weights-only-numpy"))
    assert "weights_only=False" in fixes and "float(" in fixes  # one's own file
    for name in ("np._core.multiarray.scalar", '"numpy.core.multiarray.scalar"', "np.dtype,",
                 "np.dtypes.Float64DType"):
        assert name in fixes, name


def test_the_first_fix_is_the_likeliest_case_a_reader_met():
    assert _why_and_fix("input-type-weight-type")[0][1].strip().startswith("x = x.to(device)")
    memory = " ".join(fix for _, fix in _why_and_fix("cuda-out-of-memory"))
    assert "total_loss += loss.item()" in memory and "with torch.no_grad():" in memory
    (why, fix), (_, device_line) = _why_and_fix("torch-not-compiled-with-cuda")
    assert "torch.version.cuda" in fix and "CPU-only build" in why
    assert "torch.accelerator" in device_line
    why, fix = _why_and_fix("missing-unexpected-keys")[0]
    assert "returns `None`" in why and "model.load_state_dict(state)" in fix


#: The entries a reader at 2 a.m. used (docs/errors.md, round 2): each opens with a triage line.
TRIAGED = ["same-device", "deserialize-no-cuda", "deserialize-device-count",
           "missing-unexpected-keys", "weights-only-numpy", "flat-loss-optimizer-before-to",
           "input-type-weight-type", "cuda-out-of-memory", "dataparallel-device-ids",
           "meta-no-data"]


@pytest.mark.parametrize("entry_id", TRIAGED)
def test_the_entries_readers_use_most_open_with_a_one_line_triage_by_symptom(entry_id):
    (entry,) = [e for e in ENTRIES if e["id"] == entry_id]
    branches = build_errors.triage(entry)
    assert branches and all("\n" not in b for b in branches), entry_id
    assert all("->" in b for b in branches[1:]) and "->" in " ".join(branches), entry_id
    triage = " ".join(branches)
    if len(build_errors.causes(entry)) > 1:
        assert re.search(r"causes? \d", triage), f"{entry_id}: which symptom, which cause"
    page = build_errors.render([entry])
    after_heading = page.split(f"## {build_errors._escaped(entry['title'])}\n\n", 1)[1]
    usual = entry.get("usual", "").strip()
    label = "**Usually:**" if entry.get("symptom") else "**Usual fix:**"
    first = (f"**First:** {branches[0]}\n" if len(branches) == 1 else
             "**First:**\n\n" + "".join(f"- {b}\n" for b in branches))
    opening = (f"{label} {usual}\n\n" if usual else "") + first
    assert after_heading.startswith(opening), "the usual fix, if any, then the triage, come first"


def test_a_usual_fix_is_one_line_with_code_and_names_a_fix_the_entry_gives():
    usual = [e for e in ENTRIES if e.get("usual")]
    assert {e["id"] for e in usual} >= {"same-device", "weights-only-numpy", "resume-differs"}
    for entry in usual:
        assert build_errors.problems(entry) == [], entry["id"]
        code = re.findall(r"`([^`]+)`", entry["usual"])
        fixes = "\n".join([c.get("fix", "") for c in build_errors.causes(entry)]
                          + [entry.get("note", ""), entry.get("fix", "")])
        assert any(piece in fixes for piece in code), (entry["id"], code)
    assert "the usual fix is one line, with its code" in build_errors.problems(
        {"cause": [GOOD_CAUSE], "usual": "move the batch"})


def test_the_triage_of_the_two_entries_with_a_check_is_followed_by_code_that_runs():
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    assert "named_parameters()" in same["check"] and "named_buffers()" in same["check"]
    same_triage = " ".join(build_errors.triage(same))
    assert "found at least two devices" in " ".join(build_errors.more(same))  # the rarer signs
    assert "(cause 1)" in same_triage and "(cause 3)" in same_triage
    (flat,) = [e for e in ENTRIES if e["id"] == "flat-loss-optimizer-before-to"]
    flat_triage = " ".join(build_errors.triage(flat))
    assert "model.train()" in flat_triage
    assert "`holds: False`" in flat_triage and "`changed: False`" in flat_triage
    # Both checks run as pasted, and print what their triage reads.
    import contextlib
    import io

    import torch
    from torch import nn

    def run(code, **names):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, {"torch": torch, **names})  # noqa: S102 - the catalogue's own snippet
        return printed.getvalue().strip()

    model = nn.Linear(3, 2)
    assert run(same["check"], model=model, inputs=torch.ones(1, 3)) == (
        "cpu [] -> look in forward, plain attributes, the optimizer (causes 3-5)")
    assert run(same["check"], model=model, inputs=torch.ones(1, 3, device="meta")) == (
        "meta ['weight', 'bias'] -> the model and the batch are apart: move both to one device "
        "(cause 1)")
    half = nn.Linear(3, 2)
    half.register_buffer("scale", torch.ones(2, device="meta"))  # one tensor elsewhere
    assert run(same["check"], model=half, inputs=torch.ones(1, 3)) == (
        "cpu ['scale'] -> move the model after its last change")
    split = nn.Linear(3, 2)
    split.hf_device_map = {"embed": 0, "head": 1}  # as from_pretrained(device_map="auto") sets it
    assert run(same["check"], model=split, inputs=torch.ones(1, 3)) == (
        "cpu [] -> a split model: inputs.to(model.device), never .to the model")
    one = nn.Linear(3, 2)
    one.hf_device_map = {"": 0}  # loaded whole on one GPU: not split
    assert run(same["check"], model=one, inputs=torch.ones(1, 3)).endswith("(causes 3-5)")
    data = {"inputs": torch.ones(4, 3), "targets": torch.zeros(4, 2), "loss_fn": nn.MSELoss()}
    trained = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
    assert run(flat["check"], **data, **trained) == (
        "holds: True changed: True -> it trains: look at model.train(), the learning rate, the "
        "data (causes 3-4)")
    frozen = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.0)}
    assert run(flat["check"], **data, **frozen) == (
        "holds: True changed: False -> check where zero_grad() is, and the learning rate (cause 4)")
    stale = {"model": nn.Linear(3, 2), "optimizer": trained["optimizer"]}  # a replaced model
    assert run(flat["check"], **data, **stale) == (
        "holds: False changed: False -> build the optimizer again, after the model's last change "
        "(cause 2)")
    page = build_errors.render([same])
    check_at = page.index("```python\nheld = [*model.named_parameters()")
    assert page.index("**First:**") < check_at < page.index("```text")


@pytest.mark.parametrize(("entry", "complaint"), [
    ({"cause": [GOOD_CAUSE], "triage": "a -> cause 1.\nb -> cause 2."}, "the triage is one line"),
    ({"cause": [GOOD_CAUSE], "triage": ["a -> cause 1.", "b ->\ncause 2."]}, "one-line branches"),
    ({"cause": [GOOD_CAUSE], "check": "a = 1\n" * 16}, "one to fifteen short lines"),
    ({"cause": [GOOD_CAUSE], "check": "```python\nx = 1\n```"}, "without a fence"),
    ({"cause": [GOOD_CAUSE], "check": "print(model(...))"}, "an ellipsis"),
])
def test_a_triage_or_check_a_reader_cannot_use_is_refused(entry, complaint):
    assert any(complaint in problem for problem in build_errors.problems(entry))


def test_the_index_recommends_the_map_location_notebook_05_recommends():
    summary = next(cell.source for cell in nbformat.read(
        lessons.ROOT / "notebooks" / "05_save_load_scenarios.ipynb", as_version=4).cells
        if cell.source.startswith("## Summary"))
    assert 'map_location="cpu"' in summary
    for entry_id in ("deserialize-no-cuda", "deserialize-device-count"):
        (entry,) = [e for e in ENTRIES if e["id"] == entry_id]
        fixes = [cause.get("fix", "") for cause in build_errors.causes(entry)]
        fixes.append(entry.get("fix", ""))
        loads = [line for fix in fixes for line in fix.splitlines() if "map_location=" in line]
        assert loads and 'map_location="cpu"' in loads[0], (entry_id, loads)
        assert not any("map_location=device" in line for line in loads), (
            f"{entry_id}: pasted code may not define `device`; name the device")


def test_the_numpy_fixes_fit_a_screen_and_keep_the_original_file():
    lines = [line for _, fix in _why_and_fix("weights-only-numpy")
             for line in build_errors.fix_lines(fix)]
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    own = _why_and_fix("weights-only-numpy")[0][1]
    assert "torch.save(state, path)" not in own and "torch.save(state, " in own


def test_a_plain_checkpoint_into_a_wrapped_model_is_a_cause_of_its_own():
    fixes = " ".join(fix for _, fix in _why_and_fix("missing-unexpected-keys"))
    assert "model.module.load_state_dict(state)" in fixes and '"module." + k' in fixes


def test_the_convolution_source_note_comes_after_the_causes():
    (entry,) = [e for e in ENTRIES if e["id"] == "input-type-weight-type"]
    page = build_errors.render([entry])
    assert "Convolution.cpp" not in entry.get("note", "")
    assert page.index("Convolution.cpp") > page.index("2. `Input type (torch.cuda.FloatTensor)")


def test_a_library_route_comes_before_the_causes_and_many_live_links_are_a_list():
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    page = build_errors.render([same])
    assert (page.index("**When the failing line is in a library**")
            < page.index("**Most likely causes") < page.index("How to read the two devices"))
    assert "**Watch it happen:**\n\n- [04 · 1. Meet the error" in page
    (one,) = [e for e in ENTRIES if e["id"] == "deserialize-device-count"]
    assert "**Watch it happen:** [05 · " in build_errors.render([one])


def test_the_split_model_route_is_first_and_gives_the_options_in_order():
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    first = build_errors.triage(same)[0]
    assert 'device_map="auto"' in first and "inputs.to(model.device)" in first
    assert "wrapper_CUDA_gather" in first
    without = build_errors.triage(same)[1]
    assert "WITHOUT `device_map`" in without and "cause 6" in without
    assert "torch.cuda.set_device(" in same["cause"][5]["fix"]
    options = ["model.device", 'device_map={"": 0}', "a `device_map` of your own", "max_memory={0:",
               "CUDA_VISIBLE_DEVICES=0,1", "trust_remote_code"]
    at = [same["library"].index(option) for option in options]
    assert at == sorted(at), "the options in the order to try them"
    assert any("optimizer.step()" in b and "cause 5" in b for b in build_errors.triage(same))


def test_resuming_failures_are_found_from_a_search_for_resum():
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    assert "third-party optimizer" in same["cause"][4]["why"]
    (resume,) = [e for e in ENTRIES if e["id"] == "resume-differs"]
    assert any("(#same-device-cause-5)" in b and "resum" in b for b in build_errors.triage(resume))


def test_the_page_tells_a_reader_to_search_a_distinctive_word_and_lists_the_user_variants():
    page = build_errors.render(ENTRIES)
    head = page[:page.index(f'<a id="{ENTRIES[0]["id"]}"></a>')]  # above the first entry
    assert all(word in head for word in ("`deserialize`", "`SparseMPS`", "`Placeholder`"))
    assert "attempts to deserialize" in page and "wrapper_CUDA_gather" in page


def test_a_library_torch_load_without_a_device_option_has_a_no_edit_fallback():
    (entry,) = [e for e in ENTRIES if e["id"] == "deserialize-no-cuda"]
    library = entry["library"]
    assert 'functools.partial(torch.load, map_location="cpu")' in library
    assert "never edit" in library and "cloned" in library and "report it upstream" in library
    import functools

    import torch
    saved = io.BytesIO()
    torch.save({"w": torch.ones(2)}, saved)
    patched = functools.partial(torch.load, map_location="cpu")
    saved.seek(0)
    assert patched(saved)["w"].device.type == "cpu"
    saved.seek(0)
    assert patched(saved, map_location="meta")["w"].is_meta, "a caller's own keyword still wins"


def test_the_mps_check_lists_what_is_not_on_mps():
    import torch
    from torch import nn
    (entry,) = [e for e in ENTRIES if e["id"] == "mps-placeholder"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(entry["check"], {"model": nn.Linear(3, 2), "inputs": torch.ones(1, 3)})  # noqa: S102
    assert printed.getvalue().strip() == "cpu ['weight', 'bias']"
    assert "F.linear" in " ".join(build_errors.triage(entry))


def test_the_sparse_mps_entry_says_what_pytorch_supports_now():
    import torchgen
    (entry,) = [e for e in ENTRIES if e["id"] == "mps-sparse"]
    assert "pip install -U torch" in entry["fix"] and "2.13" in entry["causes"][0]
    yaml = (Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"
            / "native_functions.yaml").read_text()
    start = yaml.index("- func: _sparse_coo_tensor_with_dims_and_tensors(")
    assert "SparseMPS" in yaml[start:yaml.index("- func:", start + 1)]


def test_the_page_tells_an_installed_package_from_code_you_cloned_and_says_search_ignores_case():
    page = (lessons.ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    top = page[:page.index(f'<a id="{ENTRIES[0]["id"]}"></a>')]  # above the first entry
    assert "site-packages" in top and "never edit it" in top
    assert "cloned" in top and "editing it is the fix" in top
    assert "ignores case" in top


def test_the_entries_that_promised_a_library_route_have_one():
    ids = {"index-device", "generator-device", "dataparallel-device-ids", "same-device",
           "weights-only", "meta-no-data", "input-type-weight-type", "deserialize-no-cuda"}
    assert all(e.get("library", "").strip() for e in ENTRIES if e["id"] in ids)


def test_set_default_device_none_leaves_a_default_tensor_type_in_force():
    import warnings

    import torch
    (entry,) = [e for e in ENTRIES if e["id"] == "generator-device"]
    assert "set_default_tensor_type(torch.FloatTensor)" in entry["cause"][0]["fix"]
    assert 'generator=torch.Generator(device="cuda")' in entry["library"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # set_default_tensor_type is deprecated
        try:
            torch.set_default_tensor_type(torch.DoubleTensor)
            torch.set_default_device(None)
            assert torch.zeros(1).dtype == torch.float64, "set_default_device(None) did not undo it"
            torch.set_default_tensor_type(torch.FloatTensor)
            assert torch.zeros(1).dtype == torch.float32, "this undoes it"
        finally:
            torch.set_default_tensor_type(torch.FloatTensor)


def test_a_dataloader_hands_its_generator_to_the_shuffling_sampler():
    import torch
    from torch.utils.data import DataLoader, RandomSampler
    generator = torch.Generator()
    loader = DataLoader(list(range(4)), shuffle=True, generator=generator)
    assert isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is generator


def test_dataparallel_with_no_gpu_runs_the_model_so_its_message_means_a_gpu_is_visible():
    import torch
    from torch import nn
    if torch.cuda.is_available():
        pytest.skip("with a GPU visible DataParallel checks the model's device")
    model = nn.Linear(3, 2)
    assert nn.DataParallel(model)(torch.ones(1, 3)).shape == (1, 2)
    (entry,) = [e for e in ENTRIES if e["id"] == "dataparallel-device-ids"]
    assert "a GPU is visible" in entry["cause"][1]["why"]
    assert "#torch-not-compiled-with-cuda" in entry["footnote"]
    assert "#deserialize-no-cuda" in entry["footnote"]


def test_torch_hub_reloads_its_cached_code_with_force_reload():
    import inspect

    import torch
    assert "force_reload" in inspect.signature(torch.hub.load).parameters
    (entry,) = [e for e in ENTRIES if e["id"] == "weights-only"]
    assert "force_reload=True" in entry["library"] and "torch.hub.get_dir()" in entry["library"]
    assert '" below' not in entry["cause"][1]["why"]


def test_transformers_5_no_longer_uses_low_cpu_mem_usage():
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4 still uses low_cpu_mem_usage")
    source = (Path(transformers.__file__).parent / "modeling_utils.py").read_text()
    dropped = source[source.index("# Not used anymore"):][:300]
    assert '"low_cpu_mem_usage"' in dropped
    (entry,) = [e for e in ENTRIES if e["id"] == "meta-no-data"]
    assert 'device_map={"": int(os.environ["LOCAL_RANK"])}' in entry["library"]


def _owner(anchor: str) -> str:
    """The id of the entry an anchor of the page is in (its own id, or the longest id it
    starts with)."""
    ids = [entry["id"] for entry in ENTRIES]
    return anchor if anchor in ids else max(
        (id_ for id_ in ids if anchor.startswith(f"{id_}-")), key=len)


def _said(entry_id: str) -> list[str]:
    """What was printed for an entry: its messages, older wordings and the corpus's reports."""
    (entry,) = [e for e in ENTRIES if e["id"] == entry_id]
    return ([*entry.get("messages", []), *entry.get("older_wordings", [])]
            + [report["message"] for report in REPORTS.values() if report["entry"] == entry_id])


def test_every_fragment_listed_at_the_top_is_one_someone_saw():
    for entry in ENTRIES:
        for item in build_errors.look_for(entry):
            said = _said(entry["id"]) + _said(_owner(item["at"]))
            assert any(item["text"] in text for text in said), (
                f"{entry['id']}: {item['text']!r} is in no message of the entry it leads to, nor "
                "in a report of the corpus: never invent one")


def _top_rows() -> list[tuple[str, str]]:
    """(what a reader matches, the entry it leads into) for each line of the list at the top:
    the title's stable parts (cut at " (", " ... ", " / " and a final "!"), and the fragments."""
    rows = []
    for entry in ENTRIES:
        if not build_errors.shown(entry):
            continue
        for part in re.split(r" \(| \.\.\. | / ", entry["title"]):
            rows.append((part.strip().rstrip("!."), entry["id"]))
        rows += [(item["text"], _owner(item["at"])) for item in build_errors.look_for(entry)]
    return [(text, entry_id) for text, entry_id in rows if len(text) > 12]


@pytest.mark.parametrize("report", list(REPORTS.values()), ids=list(REPORTS))
def test_every_report_of_the_corpus_is_found_in_the_list_at_the_top_of_the_page(report):
    """A reader at 2 a.m. finds their message in the list at the top (or with Ctrl+F there):
    some line of it is part of the message as the user pasted it, and leads into its entry."""
    message = normalized(report["message"]).lower()
    leads = {entry_id for text, entry_id in _top_rows() if normalized(text).lower() in message}
    assert report["entry"] in leads, (report["entry"], leads)


def _display_lines(text: str) -> int:
    return sum(max(1, -(-len(line) // 100)) for line in text.splitlines())


@pytest.mark.parametrize("entry_id", TRIAGED)
def test_an_entry_says_what_to_do_now_within_its_first_screen(entry_id):
    """The usual fix and the triage (which fix fits where the traceback ends) fit the first
    screen below the heading: 25 lines of 100 characters, the depth below them."""
    (entry,) = [e for e in ENTRIES if e["id"] == entry_id]
    page = build_errors.render([entry])
    entry_text = page[page.index(f"## {build_errors._escaped(entry['title'])}"):]
    first_screen = entry_text[:entry_text.index("```")]
    assert "**First:**" in first_screen
    assert _display_lines(first_screen) <= 25, _display_lines(first_screen)


def test_the_same_device_triage_routes_by_where_the_traceback_ends_and_links_each_route():
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    branches = build_errors.triage(same)
    assert len(branches) <= 5
    routes = " ".join(branches)
    for where in ('device_map="auto"', "WITHOUT `device_map`", "optimizer.step()",
                  "your own code", "installed package"):
        assert where in routes, where
    for anchor in ("same-device-split-model", "same-device-cause-6", "same-device-cause-5",
                   "same-device-in-a-library"):
        assert f"](#{anchor})" in routes, anchor
    page = (lessons.ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    split = page[page.index('<a id="same-device-split-model"></a>'):]
    assert split.split("\n\n", 2)[1].startswith("A model split over GPUs")
    cause5 = page[page.index('<a id="same-device-cause-5"></a>'):]
    assert cause5.split("\n\n", 2)[1].startswith("5. Optimizer state")


def test_the_same_device_entry_reads_the_two_devices_by_one_rule_in_its_first_line():
    """PyTorch names the first argument on another device than the operation's first tensor
    (adaption.h, adaption.cpp); for addmm that first tensor is a linear layer's bias. So the named
    argument is not always the misplaced tensor: the device that is not yours says which is."""
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    usual = same["usual"]
    assert "the one that is not yours is where it sits" in usual
    assert "](#same-device-reading)" in usual
    # The rule per wording is a small table, just below the first screen (above the messages).
    rows = {row.split(" | ")[0].strip("| "): row.split(" | ")[1]
            for row in same["reading"].splitlines() if row.startswith("| `")}
    assert rows["`but got X is on A, different from other tensors on B`"] == "A"
    assert rows["`found at least two devices, A and B! (... argument X ...)`"] == "B"
    assert "| the message reads | the named argument is on | usually misplaced |" in same["reading"]
    page = build_errors.render([same])
    assert (page.index("```python\nheld =") < page.index('<a id="same-device-reading"></a>')
            < page.index("```text"))
    mat2 = [b for b in build_errors.more(same) if b.startswith("Names `mat2`")]
    assert mat2 and "addmm(bias, input, weight.t())" in mat2[0]
    assert "matmul(input, weight.t())" in mat2[0] and "never moved" in mat2[0]
    said = " ".join([*build_errors.triage(same), *build_errors.more(same),
                     same["older_note"], same["footnote"]])
    assert "the batch or the target was not moved: causes 1-2" not in said
    assert "on the CPU: the batch was not moved" not in said
    reading = ("`cpu and cuda:0 ... argument mat1 ...\nwrapper_CUDA_addmm` means the layer is on "
               "the CPU")
    assert reading in same["footnote"]


def test_the_flux_trainer_report_and_the_library_route_name_the_block_swap():
    """`cpu and cuda:0 ... argument mat1 ... wrapper_CUDA_addmm`: the bias (checked first) on the
    CPU, the input on cuda:0: blocks left on the CPU by the node's blocks_to_swap, not the input."""
    report = REPORTS["https://github.com/kijai/ComfyUI-FluxTrainer/issues/116"]
    assert "blocks_to_swap" in report["cause"] and "blocks_to_swap = 0" in report["fix"]
    assert "Move the input" not in report["fix"]
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    library = same["library"]
    assert "`blocks_to_swap = 0`" in library
    for thread in ("Comfy-Org/ComfyUI/issues/5336", "ComfyUI-FluxTrainer/issues/124",
                   "ComfyUI-FluxTrainer/issues/159"):
        assert thread in library, thread
    assert any("later stage" in b and "hhmarl_2D/issues/12" in b for b in build_errors.more(same))


def test_every_library_route_opens_with_one_line_linking_to_the_rule_said_once_at_the_top():
    """Installed package or cloned code: the rule is said once, at the top of the page; each
    library section opens with one short line that links to it (not the paragraph again)."""
    split = build_errors.LIBRARY_SPLIT
    assert "](#in-a-library)" in split and "\n" not in split and len(split) <= 100
    assert "`site-packages`): never edit it" in split and "cloned: edit it" in split
    page = (lessons.ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    top = page[:page.index(f'<a id="{ENTRIES[0]["id"]}"></a>')]
    rule = top[top.index('<a id="in-a-library"></a>'):]
    assert "`site-packages`" in rule and "never edit it" in rule and "`custom_nodes/`" in rule
    assert "edit the failing line" in rule
    for entry in ENTRIES:
        if entry.get("library", "").strip():
            page = build_errors.render([entry])
            assert f"**When the failing line is in a library**\n\n{split}\n\n" in page, entry["id"]
            assert "do not edit its source" not in entry["library"] or "installed" in entry[
                "library"], entry["id"]


def test_the_weights_only_route_for_an_app_uses_what_torch_load_reads():
    import torch.serialization
    source = Path(torch.serialization.__file__).read_text()
    assert 'os.getenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"' in source
    assert "can only override if callsite did not explicitly set weights_only" in source
    (entry,) = [e for e in ENTRIES if e["id"] == "weights-only"]
    library = entry["library"]
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in library and "every file the app loads" in library
    assert "-m pip install -U ultralytics" in library and "app's own Python" in library
    assert "around the library's own call" not in entry["cause"][1]["why"]


def test_the_resume_cause_keeps_the_order_first_and_names_the_package_from_the_traceback():
    (same,) = [e for e in ENTRIES if e["id"] == "same-device"]
    why = same["cause"][4]["why"]
    assert "build the optimizer from the moved model, then load" in why
    assert "pytorch_optimizer/optimizer/prodigy.py" in why
    assert "Prodigy-plus-schedule-free fixed it" not in why
