"""Write a notebook as a first read shows it: main flow with outputs, folded parts closed.

    python -m tools.first_read notebooks/02_copy_pitfall.ipynb > /tmp/02.md
    python -m tools.first_read --all OUT_FOLDER      # README plus every lesson, for a reader test

What opens folded (a "Going deeper" or "On a CPU-only machine" part, a <details> block, a
cell tagged going-deeper, cpu-only or hidden-check) is one line naming it, as JupyterLab shows
it closed; everything else is the cell and its text outputs. The same rule as
tools/reading_time.py. Used to hand a newcomer the notebooks as they read them.

It also counts the collapsed code cells ("bars") that first read meets (:func:`bars`): in
JupyterLab each is a thin bar to skip. The budget (tests/repo/test_bars.py): at most
one per numbered section on average, at most two in one section, none between a question and
its answer.

    python -m tools.first_read --bars        # bars per section of every lesson
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import nbformat

from tools import lessons, reading_time, workspace


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    data = output.get("data", {})
    if any(kind.startswith("image/") for kind in data):
        return "[a figure]\n"
    return data.get("text/plain", "") + "\n"


def _folded_code(source: str) -> str:
    """How a folded code cell shows: its first line's title, if it has one."""
    first = source.split("\n", 1)[0]
    title = first.removeprefix("# @title").lstrip("# ").strip() if first.startswith("#") else ""
    return f"[folded code cell: {title}]" if title else "[folded code cell]"


def first_read(path: Path) -> str:
    """Return the notebook at ``path`` as Markdown, with what opens folded left closed."""
    notebook = nbformat.read(path, as_version=4)
    parts, was_folded = [], False
    for cell, tags, _source, folded in reading_time.walk(notebook.cells):
        opened = [t for _, t in reading_time.headings(cell.source)
                  if reading_time.is_optional_heading(t)] if cell.cell_type == "markdown" else []
        if folded and (opened or not was_folded):  # a folded part starts: its heading, closed
            parts.append(f"[folded: {opened[-1] if opened else 'a folded part'}]")
        was_folded = folded
        if folded:
            continue
        if cell.cell_type == "markdown":
            shown, hidden = reading_time._split_details(cell.source)
            summaries = re.findall(r"<summary>(.*?)</summary>", cell.source, re.S)
            for summary in summaries:  # shown once, as the folded part's title below
                shown = shown.replace(summary, "", 1)
            parts.append(shown.strip())
            parts += [f"[folded: {re.sub('<[^>]+>', '', s).strip()}]" for s in summaries]
        elif tags & (reading_time.OPTIONAL_TAGS | {reading_time.CHECK_TAG}):
            parts.append(_folded_code(cell.source))
        elif cell.cell_type == "code":
            outputs = "".join(_text(o) for o in cell.get("outputs", []))
            quiz = cell.source.startswith("utils.quiz(")  # its source is hidden: widget only
            jupyter = cell.metadata.get("jupyter", {})
            if not jupyter.get("source_hidden"):
                parts.append(f"```python\n{cell.source}\n```")
            elif not quiz:  # folded: under its title if it has one (the setup helpers)
                parts.append(_folded_code(cell.source))
            if outputs.strip() and not jupyter.get("outputs_hidden"):
                label = "A quiz (a widget: click an answer)" if quiz else "Output"
                parts.append(f"{label}:\n```\n{outputs.rstrip()}\n```")
    return "\n\n".join(p for p in parts if p) + "\n"


TOP = "(top)"  # the part before the first numbered section: the title and the setup


def _is_bar(cell, tags: set[str]) -> bool:
    """A code cell a first read meets collapsed: its source hidden, and not an optional part."""
    hidden = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden")
    optional = tags & reading_time.OPTIONAL_TAGS
    return cell.get("cell_type") == "code" and bool(hidden) and not optional


def bars(cells: list[dict]) -> dict[str, int]:
    """Return the bars a first read meets per ``##`` section, in order (``TOP`` first).

    The main flow is :func:`tools.reading_time.walk`'s: a "Going deeper" or "On a CPU-only
    machine" part, and cells tagged going-deeper or cpu-only, are folded, so their code is not
    met. A bar is a code cell whose source is collapsed (a check cell, a quiz, the setup
    helpers). A ``##`` heading inside a markdown cell starts its section wherever it stands.
    """
    counts, section = {TOP: 0}, TOP
    for cell, tags, source, folded in reading_time.walk(cells):
        if cell.get("cell_type") == "markdown":
            for level, text in reading_time.headings(source):
                if level == 2 and not reading_time.is_optional_heading(text):
                    section = text.strip()
                    counts.setdefault(section, 0)
        elif not folded and _is_bar(cell, tags):
            counts[section] += 1
    return counts


def bars_between_questions_and_answers(cells: list[dict]) -> list[int]:
    """Return the indexes of the bars a first read meets between a question and its answer
    (:func:`tools.workspace.questions`); a quiz is part of its question, not a bar between."""
    found = []
    main_flow = {i for i, (_, tags, _, folded) in enumerate(_indexed_walk(cells))
                 if not folded and not tags & reading_time.OPTIONAL_TAGS}
    for question, answer in workspace.questions(cells):
        for index in range(question + 1, answer if answer is not None else question + 1):
            cell = cells[index]
            tags = set(cell.get("metadata", {}).get("tags", []))
            quiz = workspace._text(cell).lstrip().startswith("utils.quiz(")
            if index in main_flow and _is_bar(cell, tags) and not quiz:
                found.append(index)
    return found


def _indexed_walk(cells: list[dict]):
    """:func:`tools.reading_time.walk`, with a ``(cell, tags, source, folded)`` for every cell,
    the navigation cells included (they are never folded), so indexes match ``cells``."""
    walked = iter(reading_time.walk(cells))
    for cell in cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & reading_time.NAV_TAGS:
            yield cell, tags, "", False
        else:
            yield next(walked)


def bar_budget(path: Path) -> list[str]:
    """What breaks the bar budget in the notebook at ``path`` (an empty list: none)."""
    cells = nbformat.read(path, as_version=4).cells
    counts = bars(cells)
    sections = len(counts) - 1
    problems = []
    if sum(counts.values()) > max(sections, 1):
        problems.append(f"{sum(counts.values())} bars in {sections} sections")
    problems += [f"{n} bars in {name!r}" for name, n in counts.items() if n > 2]
    problems += [f"a bar between a question and its answer: cell {i}"
                 for i in bars_between_questions_and_answers(cells)]
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?")
    parser.add_argument("--all", metavar="OUT_FOLDER")
    parser.add_argument("--bars", action="store_true", help="bars per section of every lesson")
    args = parser.parse_args()
    if args.bars:
        for path in lessons.lesson_notebooks():
            counts = bars(nbformat.read(path, as_version=4).cells)
            worst = max(counts.items(), key=lambda item: item[1])
            over = "; ".join(bar_budget(path))
            print(f"{path.name:34} sections {len(counts) - 1:2}  bars {sum(counts.values()):3}  "
                  f"most {worst[1]} ({worst[0][:40]}){'  OVER: ' + over if over else ''}")
    elif args.all:
        out = Path(args.all)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(lessons.ROOT / "README.md", out / "README.md")
        (out / "docs").mkdir(exist_ok=True)
        shutil.copy(lessons.ROOT / "docs" / "errors.md", out / "docs" / "errors.md")
        for path in lessons.lesson_notebooks():
            (out / f"{path.stem}.md").write_text(first_read(path), encoding="utf-8")
    else:
        print(first_read(Path(args.notebook)), end="")


if __name__ == "__main__":
    main()
