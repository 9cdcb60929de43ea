"""The error index (docs/errors.toml -> docs/errors.md) holds only messages someone saw.

Every message is printed by a stored output of a notebook or lab, quoted in one of their
cells, or recorded from a real GPU run in docs/gpu-verification.md; every link points to a
notebook heading that exists; every section whose stored outputs raise a device or checkpoint
error is in the index. Pending messages (no notebook shows them yet) are expected failures:
pytest lists them, and reports XPASS once a cell shows one (then move it to `messages`).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tools import build_errors, lessons, reading_time

ENTRIES = build_errors.catalogue()
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
        for message in entry.get("messages", []):
            yield pytest.param(message, id=f"{entry['id']}:{message[:40]}")
        for pending in entry.get("pending", []):
            reason = (f"pending: {pending['message']!r} is shown by no notebook yet; it belongs in "
                      f"{pending['notebook']}: {pending['snippet']}")
            name = f"{entry['id']}:pending:{pending['message'][:40]}"
            yield pytest.param(pending["message"], id=name,
                               marks=pytest.mark.xfail(reason=reason, strict=False))


@pytest.mark.parametrize("message", list(_messages()))
def test_every_message_is_one_a_notebook_prints_or_quotes_or_a_gpu_run_recorded(message):
    assert seen(message), f"no notebook, lab or GPU record shows {message!r}: never invent one"


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
            assert path.exists(), f"{entry['id']}: no notebook {where['notebook']}"
            assert where["heading"] in _headings(path), (
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
            {"notebook": notebook, "heading": heading}.items() <= where.items()
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
    assert targets and not targets - shown, f"links to entries not shown: {targets - shown}"


def test_the_index_is_generated_from_the_catalogue():
    assert build_errors.stale() is None, "docs/errors.md is out of date: run `make nav`"


def test_pending_messages_are_left_out_of_the_page_and_say_where_they_belong():
    page = (lessons.ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    for entry in ENTRIES:
        for pending in entry.get("pending", []):
            assert pending["message"] not in page
            assert (lessons.ROOT / pending["notebook"]).exists() and pending["snippet"]


def test_each_entry_has_an_id_a_title_causes_and_a_fix():
    ids = [entry["id"] for entry in ENTRIES]
    assert len(ids) == len(set(ids))
    for entry in ENTRIES:
        assert re.fullmatch(r"[a-z0-9-]+", entry["id"]), entry["id"]
        assert entry["title"] and entry["causes"] and entry["fix"].strip(), entry["id"]
        assert entry.get("messages") or entry.get("pending") or entry.get("symptom"), entry["id"]


def test_the_flat_loss_entry_says_plainly_what_is_not_the_cause_on_cuda():
    (entry,) = [e for e in ENTRIES if e["id"] == "flat-loss-optimizer-before-to"]
    first = entry["causes"][0]
    assert first.startswith("**Not your bug, on CUDA:**") and "same Parameter objects" in first


def test_the_readme_sends_a_reader_with_an_error_to_the_index_near_the_top():
    top = (lessons.ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:12]
    assert any("Got an error? Find it here: [docs/errors.md](docs/errors.md)" in line
               for line in top)
