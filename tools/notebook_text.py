"""Edit a notebook as plain text, then turn the text back into the notebook.

Authoring aid: the .ipynb stays the source of truth (commit only the .ipynb).

    python -m tools.notebook_text to-text notebooks/01_tensor_to.ipynb > /tmp/01.py
    # edit /tmp/01.py
    python -m tools.notebook_text from-text /tmp/01.py notebooks/01_tensor_to.ipynb
    make check NB=notebooks/01_tensor_to.ipynb   # re-run it, then nav, nbval and tests/repo

The text format: an optional first line ``#! covers: ...`` (the README's one-line
summary); then cells, each starting with ``# %%`` (code) or ``# %% [markdown]``,
optionally followed by ``id=CELL_ID`` and ``tags=tag1,tag2``. Markdown is written as is,
not commented. Generated cells (badges and navigation, the setup helpers above the setup cell)
are left out of the text; from-text writes them back (so the notebook runs at once). The text
holds no outputs, so neither does the notebook from-text writes: run it next (``make check``, or
``tools.run_notebooks``, which then refreshes the README table and its reading times). Until it
has run, ``make nav`` refuses it rather than write a reading time without its outputs.

Cell ids survive the round trip: a cell keeps the id its marker line names, a new cell (a
marker without ``id=``) gets a fresh one, so anything keyed by cell id (review notes, a
translation) follows a cell when cells are added or moved. Written into an existing notebook,
each cell also keeps the rest of its metadata (a hidden source, a collapsed heading).
"""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import nbformat

from tools import build_nav

CELL_LINE = re.compile(r"^# %%( \[markdown\])?(?: id=(\S+))?(?: tags=(\S+))?\s*$")


def to_text(path: Path) -> str:
    """Return ``path`` as percent-format text, without generated cells and outputs."""
    notebook = nbformat.read(path, as_version=4)
    lines = []
    covers = notebook.metadata.get("lessons", {}).get("covers")
    if covers:
        lines.append(f"#! covers: {covers}")
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if build_nav.GENERATED_TAGS & set(tags):
            continue
        marker = "# %% [markdown]" if cell.cell_type == "markdown" else "# %%"
        marker += f" id={cell.id}" if cell.get("id") else ""
        lines.append(marker + (f" tags={','.join(tags)}" if tags else ""))
        lines.append(cell.source)
    return "\n".join(lines) + "\n"


def from_text(text: str, previous: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
    """Return a notebook (no outputs) built from percent-format ``text``.

    ``previous`` (the notebook being rewritten, if any) gives its notebook metadata and, for
    each cell id the text keeps, that cell's metadata other than its tags.
    """
    notebook = nbformat.v4.new_notebook()
    notebook.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                       "name": "python3"},
        "language_info": {"name": "python"},
    }
    old = {}
    if previous is not None:
        notebook.metadata = dict(previous.metadata)
        notebook.metadata.pop("lessons", None)
        old = {c.get("id"): c for c in previous.cells}
    cells: list[dict] = []
    for line in text.splitlines():
        found = CELL_LINE.match(line)
        if line.startswith("#! covers: ") and not cells:
            notebook.metadata["lessons"] = {"covers": line.removeprefix("#! covers: ").strip()}
        elif found:
            kind = "markdown" if found.group(1) else "code"
            tags = found.group(3).split(",") if found.group(3) else []
            cells.append({"kind": kind, "id": found.group(2), "tags": tags, "lines": []})
        elif cells:
            cells[-1]["lines"].append(line)
        elif line.strip():
            raise ValueError(f"text before the first '# %%' line: {line!r}")
    ids = [cell["id"] for cell in cells if cell["id"]]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"cell ids used twice: {repeated}; remove the id= of the copy")
    for cell in cells:
        body = "\n".join(cell["lines"]).strip("\n")
        cell_id = cell["id"] or uuid.uuid4().hex[:8]
        if cell["kind"] == "markdown":
            new = nbformat.v4.new_markdown_cell(body, id=cell_id)
        else:
            new = nbformat.v4.new_code_cell(body, id=cell_id)
        if cell_id in old and old[cell_id].cell_type == new.cell_type:
            new.metadata = {k: v for k, v in old[cell_id].metadata.items() if k != "tags"}
        if cell["tags"]:
            new.metadata["tags"] = cell["tags"]
        notebook.cells.append(new)
    return notebook


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "to-text":
        sys.stdout.write(to_text(Path(argv[1])))
        return 0
    if len(argv) == 3 and argv[0] == "from-text":
        target = Path(argv[2])
        previous = nbformat.read(target, as_version=4) if target.exists() else None
        notebook = from_text(Path(argv[1]).read_text(encoding="utf-8"), previous)
        notebook = build_nav.with_generated_cells(notebook, target.resolve())  # runnable at once
        target.write_text(build_nav.serialize(notebook), encoding="utf-8")
        print(f"wrote {target}, without outputs: run it next (make check NB={target})",
              file=sys.stderr)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
