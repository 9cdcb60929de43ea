"""Write a notebook as a first read shows it: main flow with outputs, folded parts closed.

    python -m tools.first_read notebooks/02_copy_pitfall.ipynb > /tmp/02.md
    python -m tools.first_read --all OUT_FOLDER      # README plus every lesson, for a reader test

What opens folded (a "Going deeper" or "On a CPU-only machine" part, a <details> block, a
cell tagged going-deeper, cpu-only or hidden-check) is one line naming it, as JupyterLab shows
it closed; everything else is the cell and its text outputs. The same rule as
tools/reading_time.py. Used to hand a newcomer the notebooks as they read them.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import nbformat

from tools import lessons, reading_time


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?")
    parser.add_argument("--all", metavar="OUT_FOLDER")
    args = parser.parse_args()
    if args.all:
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
