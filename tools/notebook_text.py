"""Edit a notebook as plain text, then turn the text back into the notebook.

Authoring aid: the .ipynb stays the source of truth (commit only the .ipynb).

    python tools/notebook_text.py to-text notebooks/01_tensor_to.ipynb > /tmp/01.py
    # edit /tmp/01.py
    python tools/notebook_text.py from-text /tmp/01.py notebooks/01_tensor_to.ipynb
    python tools/build_nav.py && python tools/run_notebooks.py notebooks/01_tensor_to.ipynb

The text format: an optional first line ``#! covers: ...`` (the README's one-line
summary); then cells, each starting with ``# %%`` (code) or ``# %% [markdown]``,
optionally followed by ``tags=tag1,tag2``. Markdown is written as is, not commented.
Generated parts (badges and navigation cells, the Colab preamble of the setup cell)
are left out of the text; tools/build_nav.py writes them back.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_nav  # noqa: E402

CELL_LINE = re.compile(r"^# %%( \[markdown\])?(?: tags=(\S+))?\s*$")


def to_text(path: Path) -> str:
    """Return ``path`` as percent-format text, without generated cells and outputs."""
    notebook = nbformat.read(path, as_version=4)
    lines = []
    covers = notebook.metadata.get("lessons", {}).get("covers")
    if covers:
        lines.append(f"#! covers: {covers}")
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if {build_nav.HEADER_TAG, build_nav.FOOTER_TAG} & set(tags):
            continue
        marker = "# %% [markdown]" if cell.cell_type == "markdown" else "# %%"
        lines.append(marker + (f" tags={','.join(tags)}" if tags else ""))
        source = cell.source
        if build_nav.SETUP_TAG in tags and source.startswith(build_nav.colab_preamble()):
            source = source[len(build_nav.colab_preamble()):].lstrip("\n")
        lines.append(source)
    return "\n".join(lines) + "\n"


def from_text(text: str) -> nbformat.NotebookNode:
    """Return a new notebook (no outputs) built from percent-format ``text``."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                       "name": "python3"},
        "language_info": {"name": "python"},
    }
    cells: list[dict] = []
    for line in text.splitlines():
        found = CELL_LINE.match(line)
        if line.startswith("#! covers: ") and not cells:
            notebook.metadata["lessons"] = {"covers": line.removeprefix("#! covers: ").strip()}
        elif found:
            kind = "markdown" if found.group(1) else "code"
            tags = found.group(2).split(",") if found.group(2) else []
            cells.append({"kind": kind, "tags": tags, "lines": []})
        elif cells:
            cells[-1]["lines"].append(line)
        elif line.strip():
            raise ValueError(f"text before the first '# %%' line: {line!r}")
    for number, cell in enumerate(cells):
        body = "\n".join(cell["lines"]).strip("\n")
        if cell["kind"] == "markdown":
            new = nbformat.v4.new_markdown_cell(body, id=f"cell-{number:02d}")
        else:
            new = nbformat.v4.new_code_cell(body, id=f"cell-{number:02d}")
        if cell["tags"]:
            new.metadata["tags"] = cell["tags"]
        notebook.cells.append(new)
    return notebook


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "to-text":
        sys.stdout.write(to_text(Path(argv[1])))
        return 0
    if len(argv) == 3 and argv[0] == "from-text":
        notebook = from_text(Path(argv[1]).read_text(encoding="utf-8"))
        Path(argv[2]).write_text(build_nav.serialize(notebook), encoding="utf-8")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
