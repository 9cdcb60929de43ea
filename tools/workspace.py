"""The learner's own folder: copies of the notebooks and labs that no update can touch.

``make lab`` runs this before it starts JupyterLab (``make workspace`` runs it alone).
It keeps ``my-work/`` (git-ignored) in the repository's root:

- the first time, it copies every lesson notebook to ``my-work/notebooks/`` and every
  student lab to ``my-work/labs/`` (the same layout as the repository, so the links
  between a lab and its lesson keep working);
- every later time, it copies only what is new in the collection, never a file that is
  already there, and says which of the learner's copies has a newer version upstream;
- ``--fresh labs/02_copy_pitfall.ipynb`` replaces one copy with the current version and
  keeps the learner's as ``labs/02_copy_pitfall-2026-11-30.ipynb`` (today's date);
- each copy opens with the outputs of its *answer cells* cleared (:func:`answer_cells`), so a
  "Predict, then run" question is not answered on screen before the learner runs the cell,
  and with the explanation that follows an answer folded (:func:`fold_explanation`): the text
  right under an answer cell often opens with the answer ("They are **not** equal"), so the
  copy puts it in a ``<details>`` fold titled "After you run the cell above". The course's own
  notebooks keep every output and every word in view (the tests compare them).

What each copy was copied from is recorded in ``my-work/.workspace.json`` (hidden in
JupyterLab's file browser): the fingerprint of the source's cells at copy time, and that of
the copy as written (its folds make it differ from the source). A copy has a newer version
upstream when the source's fingerprint has changed since; the learner edited it when its own
fingerprint is no longer the one written. Because
``my-work/`` is ignored by git, ``git pull`` (and nbgitpuller on a hub) updates the
collection without ever meeting the learner's edits. Only the standard library is used.

Usage:

    python -m tools.workspace                                # create or update my-work/
    python -m tools.workspace --fresh labs/02_copy_pitfall.ipynb
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = "my-work"
RECORD = ".workspace.json"
# What is copied: the numbered lesson notebooks and student labs (not labs/solutions/).
COPIED_FOLDERS = ("notebooks", "labs")
NUMBERED = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")
# A markdown cell that asks for a prediction: "**Predict, then run.**", "**Predict:** ...", or a
# line or sentence that starts with "Predict" ("Predict what happens, then run it.").
ASKS = re.compile(r"(?m)(^|\*\*|[.!?:]\s+)Predict\b")
ANSWER_TAG = "answer"  # a code cell whose outputs a learner's copy opens without
NOT_ANSWER_TAG = "not-answer"  # never cleared, even right after a question
CHECK_TAG = "hidden-check"  # a check cell (tools.reading_time.CHECK_TAG): prints nothing
#: The fold a copy puts around the explanation under an answer cell (:func:`fold_explanation`).
AFTER_RUNNING = "<details><summary><b>After you run the cell above</b>: what it shows</summary>"
#: Notebooks and labs the course renamed or split: a learner's copy of the old one is kept as
#: it is, and ``make lab`` says where its parts are now.
MOVED = {
    "notebooks/08_many_devices.ipynb": ("notebooks/09_many_processes.ipynb",
                                        "notebooks/10_sharded_training.ipynb"),
    "labs/08_many_devices.ipynb": ("labs/09_many_processes.ipynb",
                                   "labs/10_sharded_training.ipynb"),
}
README = """\
# My work

This folder is yours. It holds your own copies of the course's notebooks (`notebooks/`) and
labs (`labs/`): answer the exercises and take notes here. It is ignored by git, so updating
the course (`git pull`), rebuilding the labs (`make labs`) or running `make lab` again never
changes a file in it.

- The course's contents: [README](../README.md#the-notebooks).
- `make lab` copies notebooks and labs that are new in the course into this folder, and tells
  you which of your copies has a newer version, without touching them.
- For a fresh copy of one, run `make fresh COPY=labs/02_copy_pitfall.ipynb` in a terminal:
  yours is kept next to it, with today's date in its name.
- Your copies open with the answers to "Predict, then run" questions cleared: decide, then
  run the cell to see the answer. The text under it that explains the answer is folded
  ("After you run the cell above"): click it once you have run the cell. The course's own
  notebooks keep every output.
"""


def fingerprint(path: Path) -> str:
    """Return the sha256 of a notebook's cells (type and source), ignoring outputs.

    Running a notebook changes its outputs, not what it teaches or what you typed, so
    outputs, execution counts and metadata are left out. Introduced for ``make lab``.
    """
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        view = [[c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list)
                 else c["source"]] for c in cells]
    except (ValueError, KeyError, TypeError):
        view = path.read_text(encoding="utf-8", errors="replace")  # not a notebook: all of it
    return hashlib.sha256(json.dumps(view).encode()).hexdigest()


def _text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _is_quiz(cell: dict) -> bool:
    return cell["cell_type"] == "code" and _text(cell).lstrip().startswith("utils.quiz(")


def _asks(cell: dict) -> bool:
    return cell["cell_type"] == "markdown" and bool(ASKS.search(_text(cell)))


def _runs_nothing_to_read(cell: dict) -> bool:
    """A code cell that cannot be an answer: a quiz (its output is the question), a check cell
    (it prints nothing) or a cell that only writes a file (``%%writefile``)."""
    text = _text(cell).lstrip()
    return (_is_quiz(cell) or CHECK_TAG in _tags(cell)
            or text.startswith(("%%writefile", "%%file")))


def questions(cells: list[dict]) -> list[tuple[int, int | None]]:
    """Return ``(question, answer)`` index pairs for the questions in ``cells``.

    A question is a markdown cell that asks for a prediction (``ASKS``), or a quiz cell
    (``utils.quiz(...)``) that does not come right after one (then it is that question's quiz).
    Its answer, searched up to the next question:
    - the first code cell tagged ``answer``;
    - else the first code cell after it, skipping quizzes, check cells and ``%%writefile``
      cells. After a markdown question only code cells may lie between (where a markdown cell
      comes first, tag the answer instead); after a quiz, whose text says "run the next cell",
      markdown may lie between, up to the next numbered section (a ``##`` heading). A lab's
      exercise (a ``raise NotImplementedError()`` stub) is where the learner writes the answer,
      not one: the search stops there.
    ``None`` where no answer was found. A cell tagged ``not-answer`` is never one. Introduced
    for ``make lab`` (the my-work copies).
    """
    starts = []
    for index, cell in enumerate(cells):
        after_asking = index > 0 and _asks(cells[index - 1])
        if _asks(cell) or (_is_quiz(cell) and not after_asking):
            starts.append(index)
    pairs = []
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(cells)
        tagged = [i for i in range(start + 1, end)
                  if cells[i]["cell_type"] == "code" and ANSWER_TAG in _tags(cells[i])]
        found = tagged[0] if tagged else None
        for later in range(start + 1, end if not tagged else start + 1):
            candidate = cells[later]
            if candidate["cell_type"] == "markdown":
                if not _is_quiz(cells[start]) or re.search(r"(?m)^#{1,2}\s", _text(candidate)):
                    break
                continue
            if "raise NotImplementedError" in _text(candidate):
                break
            if not _runs_nothing_to_read(candidate):
                found = later
                break
        if found is not None and NOT_ANSWER_TAG in _tags(cells[found]):
            found = None
        pairs.append((start, found))
    return pairs


def answer_cells(cells: list[dict]) -> list[int]:
    """Return the indexes of the answer cells in ``cells`` (a notebook's cells): the answer of
    each of its :func:`questions`, and every code cell tagged ``answer``; never a cell tagged
    ``not-answer``. Used by ``make lab`` (the my-work copies).
    """
    found = {answer for _, answer in questions(cells) if answer is not None}
    found |= {i for i, cell in enumerate(cells)
              if cell["cell_type"] == "code" and ANSWER_TAG in _tags(cell)}
    return sorted(i for i in found if NOT_ANSWER_TAG not in _tags(cells[i]))


def explanation_cells(cells: list[dict]) -> list[int]:
    """Return the indexes of the markdown cells that explain an answer: the first cell after
    each answer cell (check cells skipped), when it is markdown and has text to fold
    (:func:`fold_explanation`). Used by ``make lab`` (the my-work copies).
    """
    found = []
    for answer in answer_cells(cells):
        after = answer + 1
        while after < len(cells) and CHECK_TAG in _tags(cells[after]):
            after += 1
        if after < len(cells) and cells[after]["cell_type"] == "markdown" \
                and fold_explanation(_text(cells[after])) != _text(cells[after]):
            found.append(after)
    return found


def _ends_explanation(paragraph: str) -> bool:
    """A heading, a new question or a fold of the course's own: where an explanation stops."""
    first = paragraph.lstrip()
    return first.startswith(("#", "<details")) or bool(ASKS.search(paragraph))


def fold_explanation(text: str) -> str:
    """Return markdown ``text`` with its opening paragraphs, up to the first heading, new
    question (``ASKS``) or ``<details>`` fold, inside an :data:`AFTER_RUNNING` fold.

    Text that opens with one of those is returned unchanged. A fenced code block is never
    split. Introduced for ``make lab`` (the my-work copies).
    """
    paragraphs, current, fenced = [], [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                paragraphs.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        paragraphs.append("\n".join(current))
    lead = []
    for paragraph in paragraphs:
        if _ends_explanation(paragraph):
            break
        lead.append(paragraph)
    if not lead:
        return text
    rest = paragraphs[len(lead):]
    return "\n\n".join([AFTER_RUNNING, *lead, "</details>", *rest])


def learners_copy(source: Path, target: Path) -> list[int]:
    """Copy the notebook ``source`` to ``target`` with its answer cells' outputs cleared and
    the explanation under each answer folded (:func:`explanation_cells`).

    Return the indexes of the cells cleared. A notebook without answer cells (or a file that
    is not a notebook) is copied byte for byte. Introduced for ``make lab``.
    """
    try:
        notebook = json.loads(source.read_text(encoding="utf-8"))
        cells = notebook["cells"]
        cleared = [i for i in answer_cells(cells)
                   if cells[i].get("outputs") or cells[i].get("execution_count") is not None]
        folded = explanation_cells(cells)
    except (ValueError, KeyError, TypeError):
        cleared, folded = [], []
    if not (cleared or folded):
        shutil.copyfile(source, target)
        return []
    for index in cleared:
        cells[index]["outputs"], cells[index]["execution_count"] = [], None
    for index in folded:
        cells[index]["source"] = fold_explanation(_text(cells[index]))
    # As nbformat and JupyterLab write a notebook, so that saving it there changes nothing else.
    target.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                      encoding="utf-8")
    return cleared


def sources(root: Path) -> list[str]:
    """Return the paths (relative to ``root``, posix) of everything a working folder copies."""
    found = []
    for folder in COPIED_FOLDERS:
        found += sorted(f"{folder}/{p.name}" for p in (root / folder).glob("*.ipynb")
                        if NUMBERED.match(p.name))
    return found


def _read_record(work: Path) -> dict:
    path = work / RECORD
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))["copies"]
    except (ValueError, KeyError) as error:
        raise SystemExit(
            f"{path} is not a record this tool wrote ({error}). Your copies are untouched; "
            f"delete {path} and run `make lab` again to start a new record."
        ) from None


def _write_record(work: Path, copies: dict) -> None:
    record = {
        "about": "Written by tools/workspace.py: the fingerprint of each copy's source when it "
                 "was copied, to tell you when the course has a newer version. Do not edit.",
        "copies": dict(sorted(copies.items())),
    }
    (work / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def _copy(root: Path, work: Path, name: str, copies: dict) -> None:
    target = work / name
    target.parent.mkdir(parents=True, exist_ok=True)
    learners_copy(root / name, target)
    copies[name] = {"source": fingerprint(root / name), "copy": fingerprint(target),
                    "copied": datetime.date.today().isoformat()}


def dated_name(path: Path, today: datetime.date | None = None) -> Path:
    """Return a free path next to ``path`` with today's date in its name.

    ``labs/02_copy_pitfall.ipynb`` -> ``labs/02_copy_pitfall-2026-11-30.ipynb``, then
    ``...-2026-11-30-2.ipynb`` if that is taken. Used for a learner's kept copies.
    """
    stamp = (today or datetime.date.today()).isoformat()
    candidate = path.with_name(f"{path.stem}-{stamp}{path.suffix}")
    number = 2
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{stamp}-{number}{path.suffix}")
        number += 1
    return candidate


def update(root: Path = ROOT, folder: str = FOLDER) -> list[str]:
    """Create or update the working folder; return the lines to show the learner.

    Copies what is missing (never overwriting a file that exists) and reports each copy
    whose source has changed since it was copied. Introduced for ``make lab``.
    """
    work = root / folder
    first_time = not work.exists()
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "README.md").exists():
        (work / "README.md").write_text(README, encoding="utf-8")
    copies = _read_record(work)
    added, newer, adopted = [], [], []
    for name in sources(root):
        if not (work / name).exists():
            _copy(root, work, name, copies)
            added.append(name)
        elif name not in copies:
            # A copy this tool has no record of: keep it, and watch the source from now on.
            copies[name] = {"source": fingerprint(root / name), "copied": None}
            adopted.append(name)
        elif copies[name]["source"] != fingerprint(root / name):
            newer.append(name)
    _write_record(work, copies)

    lines = []
    if first_time:
        lines.append(f"Created {folder}/ with your own copies of the notebooks and labs. Work "
                     f"there: updates (git pull), `make labs` and `make lab` never change them.")
    elif added:
        lines.append(f"New in the course, copied into {folder}/: {', '.join(added)}")
    for name in adopted:
        lines.append(f"Found {folder}/{name} (not copied by this tool): kept as it is; you will "
                     f"be told when the course changes {name}.")
    if newer:
        lines.append(f"The course has a newer version of {len(newer)} of your copies in "
                     f"{folder}/ (they are untouched):")
        for name in newer:
            # what was written: the copy's own fingerprint (older records: the source's)
            written = copies[name].get("copy", copies[name]["source"])
            edited = fingerprint(work / name) != written
            lines.append(f"  {name}  ({'edited by you' if edited else 'not edited by you'})")
        lines.append(f"For the new version of one, keeping yours with today's date in its name: "
                     f"make fresh COPY={newer[0]}")
    moved = [(old, new) for old, new in MOVED.items() if (work / old).exists()]
    for old, new in moved:
        lines.append(f"{folder}/{old} is kept as it is; the course split it into "
                     f"{' and '.join(new)} (your copies of those are in {folder}/ too).")
    if not (added or newer or adopted or first_time or moved):
        lines.append(f"Your copies in {folder}/ are up to date with the course.")
    return lines


def fresh(name: str, root: Path = ROOT, folder: str = FOLDER) -> list[str]:
    """Replace one copy with the course's current version, keeping the learner's under a
    dated name; return the lines to show. Introduced for ``make fresh``."""
    work = root / folder
    name = Path(name).as_posix().removeprefix("./").removeprefix(f"{folder}/")
    available = sources(root)
    if name not in available:
        raise SystemExit(
            f"No notebook or lab called {name!r} in the course. Name one of: "
            f"{', '.join(available)} (for example: make fresh COPY={available[-1]})."
        )
    work.mkdir(parents=True, exist_ok=True)
    copies = _read_record(work)
    lines = []
    if (work / name).exists():
        kept = dated_name(work / name)
        (work / name).rename(kept)
        lines.append(f"Kept your copy as {kept.relative_to(root).as_posix()}")
    _copy(root, work, name, copies)
    _write_record(work, copies)
    lines.append(f"{folder}/{name} is now the course's current version.")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=FOLDER, help="working folder (default: my-work)")
    parser.add_argument("--fresh", metavar="PATH",
                        help="replace this copy (e.g. labs/02_copy_pitfall.ipynb) with the "
                             "current version, keeping yours under a dated name")
    args = parser.parse_args(argv)
    if args.fresh is not None and not args.fresh.strip():
        raise SystemExit("Say which copy: make fresh COPY=labs/02_copy_pitfall.ipynb")
    lines = fresh(args.fresh, folder=args.folder) if args.fresh else update(folder=args.folder)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
