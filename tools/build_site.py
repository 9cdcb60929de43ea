"""Write the sources of the course's static site, and finish the HTML Sphinx builds from them.

``make site`` runs it twice, around Sphinx (site/conf.py):

    python -m tools.build_site sources build/site-src   # README, notebooks, labs, docs, as pages
    python -m tools.build_site finish build/site         # check the links; Pagefind's index

The sources are copies, made from the stored notebooks (nothing is run):

- README.md is the home page (index.md), with a table of contents in course order: the
  notebooks (notebooks/NN_topic.ipynb, in the order of their names), the student labs
  (labs/NN_topic.ipynb; never labs/solutions/), the error index (docs/errors.md), the
  teacher's guide (docs/teaching.md) and CONTRIBUTING.md.
- A link to one of those pages stays a link between pages; a link to any other file of the
  repository goes to that file on GitHub (``[tool.lessons]`` in pyproject.toml). A link to a
  heading in JupyterLab's form (``#1.-The-pitfall``) becomes the site's (``#1-the-pitfall``).
- In a notebook or a lab: the check cells (tag ``hidden-check``) and the generated helpers cell
  (``setup-helpers``) are left out; a quiz becomes its question, its choices and, folded, its
  answer; what JupyterLab shows folded stays folded: a collapsed source or output, a cell
  tagged ``going-deeper`` or ``cpu-only``, a section whose heading starts "Going deeper" or
  "On a CPU-only machine" (its heading shows, its content is folded), ``<details>`` in text.

``finish`` checks every link inside the built site: it exits 1, listing them, when a link goes
to a page or an anchor that is not there. Otherwise it writes Pagefind's search index
(site/pagefind/): each page's article, and each entry of the error index as a result of its
own, so that a search for the first words of a message finds its entry first.
"""

from __future__ import annotations

import argparse
import ast
import html
import json
import posixpath
import re
import shutil
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tools import lessons

#: Cells no reader of the site sees: the asserts that prove the text, the generated import cell.
DROPPED_TAGS = frozenset({"hidden-check", "setup-helpers"})
#: Cells folded as a whole (reading_time.OPTIONAL_TAGS), and headings whose section is folded.
FOLDED_TAGS = frozenset({"going-deeper", "cpu-only"})
FOLDED_HEADINGS = ("going deeper", "on a cpu-only machine")
#: The pages besides the notebooks and labs, in the order the site's contents list them.
GUIDES = ("docs/errors.md", "docs/teaching.md", "CONTRIBUTING.md")
ERROR_INDEX = "docs/errors.md"


def main(argv: list[str] | None = None) -> int:
    """Run ``sources OUT`` or ``finish SITE``; return the exit status (1: broken links)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("sources", help="write the site's sources").add_argument("out", type=Path)
    commands.add_parser("finish", help="mark and check the built HTML").add_argument(
        "site", type=Path
    )
    args = parser.parse_args(argv)
    if args.command == "sources":
        pages = write_sources(args.out)
        print(f"build_site: {len(pages)} pages written to {args.out}")
        return 0
    broken = finish(args.site)
    for problem in broken:
        print(f"broken link: {problem}", file=sys.stderr)
    if broken:
        print(f"build_site: {len(broken)} broken internal links in {args.site}", file=sys.stderr)
        return 1
    return 0


def site_url() -> str:
    """The site's address on GitHub Pages, from ``[tool.lessons] repository`` in pyproject.toml
    (the one place that also sets the badges): https://github.com/OWNER/NAME gives
    https://OWNER.github.io/NAME/. README.md and ``[project.urls]`` show it."""
    repository = lessons.config()["repository"].rstrip("/")
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", repository)
    if not match:
        raise ValueError(f"[tool.lessons] repository is not a GitHub address: {repository!r}")
    owner, name = match.groups()
    return f"https://{owner.lower()}.github.io/{name}/"


# --- which pages the site has ---


def site_pages() -> dict[str, str]:
    """Return {repository path: page path in the site's sources}, in the site's order.

    README.md becomes index.md; everything else keeps its path. Solutions are never listed.
    """
    pages = {"README.md": "index.md"}
    for path in [*lessons.lesson_notebooks(), *lessons.student_labs()]:
        relative = path.relative_to(lessons.ROOT).as_posix()
        pages[relative] = relative
    for guide in GUIDES:
        if (lessons.ROOT / guide).is_file():
            pages[guide] = guide
    return pages


def write_sources(out: Path) -> dict[str, str]:
    """Write every page of the site into ``out`` (emptied first); return :func:`site_pages`."""
    pages = site_pages()
    if out.exists():
        shutil.rmtree(out)
    for source, target in pages.items():
        text = (lessons.ROOT / source).read_text(encoding="utf-8")
        destination = out / target
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.endswith(".ipynb"):
            notebook = page_notebook(json.loads(text), source, pages)
            destination.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
            continue
        text = rewrite_links(text, source, pages)
        if source == ERROR_INDEX:
            text = entry_labels(text)
        if source == "README.md":
            text += contents(pages)
        destination.write_text(text, encoding="utf-8")
    return pages


def contents(pages: dict[str, str]) -> str:
    """The home page's hidden tables of contents (the site's sidebar), in course order."""
    groups = {
        "The notebooks": [t for s, t in pages.items() if s.startswith("notebooks/")],
        "The labs": [t for s, t in pages.items() if s.startswith("labs/")],
        "Help and guides": [pages[g] for g in GUIDES if g in pages],
    }
    blocks = []
    for caption, targets in groups.items():
        entries = "\n".join(re.sub(r"\.(md|ipynb)$", "", t) for t in targets)
        blocks.append(f"\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{entries}\n```\n")
    return "".join(blocks)


# --- links ---

_MARKDOWN_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
_HTML_LINK = re.compile(r"""(href=["'])([^"']+)(["'])""")


def rewrite_links(text: str, source: str, pages: dict[str, str]) -> str:
    """Return ``text`` (markdown, from ``source``) with each relative link made to work on the
    site: to another page of it, or to the file on GitHub (see the module docstring)."""

    def fix(match: re.Match) -> str:
        return match.group(1) + site_link(match.group(2), source, pages) + match.group(3)

    return _HTML_LINK.sub(fix, _MARKDOWN_LINK.sub(fix, text))


def site_link(target: str, source: str, pages: dict[str, str]) -> str:
    """Where ``target``, a link in the repository file ``source``, goes on the site."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or target.startswith(("mailto:", "{")):
        return target
    anchor = f"#{slug(unquote(parts.fragment))}" if parts.fragment else ""
    if not parts.path:
        return anchor or target
    resolved = _normalise(Path(source).parent / unquote(parts.path))
    if resolved in pages:
        here = Path(pages[source]).parent
        return _relative(pages[resolved], here) + anchor
    cfg = lessons.config()
    kind = "tree" if (lessons.ROOT / resolved).is_dir() else "blob"
    github = f"{cfg['repository'].rstrip('/')}/{kind}/{cfg['branch']}/{resolved}"
    if (lessons.ROOT / resolved).exists():
        return github + (f"#{parts.fragment}" if parts.fragment else "")
    return target  # a file that is not there: Sphinx reports the broken link


def slug(title: str) -> str:
    """A heading's anchor on the site, from its text or from JupyterLab's anchor for it.

    GitHub's form, which MyST uses (myst_parser.slugs.github_slugify): lower case, spaces to
    hyphens, anything but letters, digits, ``_`` and ``-`` dropped. JupyterLab's anchor is the
    heading's text with spaces as hyphens, so both give the same slug.
    """
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", title.lower().replace(" ", "-"))


def _normalise(path: Path) -> str:
    parts: list[str] = []
    for part in path.as_posix().split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def _relative(target: str, here: Path) -> str:
    return posixpath.relpath(target, here.as_posix())


_ANCHOR = re.compile(r'^<a id="([^"]+)"></a>\s*$', re.MULTILINE)


def entry_labels(text: str) -> str:
    """The error index's ``<a id="name"></a>`` lines as MyST targets: its links to ``#name``
    then resolve (and are checked), and each entry keeps its stable anchor."""
    return _ANCHOR.sub(r"(\1)=", text)


# --- notebooks ---


def page_notebook(notebook: dict, source: str, pages: dict[str, str]) -> dict:
    """Return a copy of ``notebook`` made for reading on the site (see the module docstring)."""
    cells: list[dict] = []
    for cell in notebook["cells"]:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & DROPPED_TAGS:
            continue
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for chunk in split_at_headings(rewrite_links(text, source, pages)):
                cells.append(_markdown(chunk))
        elif cell["cell_type"] == "code" and text.lstrip().startswith("utils.quiz("):
            cells.append(_markdown(quiz_markdown(text)))
        elif cell["cell_type"] == "code":
            cells.append(folded_code(cell))
    cells = fold_sections(cells)
    for index, cell in enumerate(cells):
        cell.setdefault("id", f"site-{index}")  # the cells made here (nbformat 4.5 wants ids)
    return {**notebook, "cells": cells}


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def heading(text: str) -> tuple[int, str] | None:
    """(level, title) when ``text`` starts with a markdown heading, else None."""
    match = _HEADING.match(text.split("\n", 1)[0])
    return (len(match.group(1)), match.group(2)) if match else None


def split_at_headings(text: str) -> list[str]:
    """Split markdown at each heading outside fenced code and ``<details>`` blocks, so that
    every heading starts a piece of its own; return the non-empty pieces."""
    pieces: list[list[str]] = [[]]
    fenced = False
    details = 0
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            if details == 0 and _HEADING.match(line) and any(p.strip() for p in pieces[-1]):
                pieces.append([])
            details += len(re.findall(r"<details\b", line, re.IGNORECASE))
            details -= len(re.findall(r"</details\s*>", line, re.IGNORECASE))
        pieces[-1].append(line)
    return [joined for piece in pieces if (joined := "\n".join(piece).strip("\n")).strip()]


def fold_sections(cells: list[dict]) -> list[dict]:
    """Fold each "Going deeper" / "On a CPU-only machine" section: its heading stays in view,
    the rest, up to the next heading of the same or a higher level, goes in ``<details>``.

    A heading inside a folded section (a deeper one) becomes bold text: a section element
    cannot start inside the fold and end outside it.
    """
    out: list[dict] = []
    open_level: int | None = None
    for cell in cells:
        found = heading(cell["source"]) if cell["cell_type"] == "markdown" else None
        if found and open_level is not None:
            level, title = found
            if level <= open_level:
                out.append(_markdown("</details>"))
                open_level = None
            else:
                rest = cell["source"].split("\n", 1)[1:]
                cell = _markdown("\n".join([f"**{title}**", *rest]))
                found = None
        if found and open_level is None and found[1].lower().startswith(FOLDED_HEADINGS):
            head, *rest = cell["source"].split("\n", 1)
            out.append(_markdown(head))
            out.append(_markdown(f'<details class="lessons-fold">\n<summary>{_OPEN_LABEL}'
                                 "</summary>"))
            open_level = found[0]
            if rest and rest[0].strip():
                out.append(_markdown(rest[0].strip("\n")))
            continue
        out.append(cell)
    if open_level is not None:
        out.append(_markdown("</details>"))
    return out


_OPEN_LABEL = "Optional: show this part"
_TITLE = re.compile(r"^\s*#\s*@title\s+(.*)$")


def folded_code(cell: dict) -> dict:
    """Return the code cell with MyST-NB's tags for what JupyterLab shows folded: a cell tagged
    going-deeper or cpu-only, a collapsed source, collapsed outputs. A ``# @title`` line is the
    fold's label."""
    metadata = dict(cell.get("metadata", {}))
    tags = [t for t in metadata.get("tags", []) if t not in DROPPED_TAGS]
    jupyter = metadata.get("jupyter", {})
    source = "".join(cell["source"])
    if set(tags) & FOLDED_TAGS or (jupyter.get("source_hidden") and jupyter.get("outputs_hidden")):
        tags.append("hide-cell")
    elif jupyter.get("source_hidden"):
        tags.append("hide-input")
    elif jupyter.get("outputs_hidden"):
        tags.append("hide-output")
    title = _TITLE.match(source.split("\n", 1)[0])
    if title and set(tags) & {"hide-cell", "hide-input"}:
        label = title.group(1).replace("{", "(").replace("}", ")")
        metadata["mystnb"] = {"code_prompt_show": label, "code_prompt_hide": label}
    metadata["tags"] = tags
    return {**cell, "metadata": metadata}


# --- quizzes ---


@dataclass(frozen=True)
class Quiz:
    """What a ``utils.quiz(...)`` cell asks (utils/widgets.py, introduced in 01_tensor_to)."""

    question: str
    choices: list[str]
    answer: str
    explanations: dict[str, str]


def read_quiz(source: str) -> Quiz:
    """The literal arguments of the ``utils.quiz(...)`` call in a cell's source."""
    call = ast.parse(source).body[0].value
    if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "utils.quiz"):
        raise ValueError(f"not a utils.quiz(...) call: {source[:60]!r}")
    names = ["question", "choices", "answer", "explanations"]
    values = dict(zip(names, (ast.literal_eval(a) for a in call.args), strict=False))
    values.update({k.arg: ast.literal_eval(k.value) for k in call.keywords})
    explanations = values["explanations"]
    if not isinstance(explanations, dict):
        explanations = dict(zip(values["choices"], explanations, strict=True))
    return Quiz(values["question"], list(values["choices"]), values["answer"], explanations)


def quiz_markdown(source: str) -> str:
    """A quiz as a reader of a static page needs it: the question, the lettered choices, and
    the answer with why each choice is right or wrong, folded."""
    quiz = read_quiz(source)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = [f"**Predict, then run:** {quiz.question}", ""]
    lines += [f"{letters[i]}) {choice}  " for i, choice in enumerate(quiz.choices)]
    right = quiz.choices.index(quiz.answer)
    lines += ["", '<details class="lessons-quiz-answer">',
              "<summary>Decide, then open: the answer</summary>", "",
              f"**{letters[right]}) {quiz.answer}.** {quiz.explanations[quiz.answer]}", ""]
    for i, choice in enumerate(quiz.choices):
        if choice != quiz.answer:
            lines.append(f"- Not {letters[i]}) {choice}: {quiz.explanations[choice]}")
    lines += ["", "</details>"]
    return "\n".join(lines)


# --- after Sphinx: marks for Pagefind, and the link check ---

_ARTICLE = '<article class="bd-article"'
_SECTION_HEADING = re.compile(
    r'<section id="([^"]+)">(\s*(?:<span id="[^"]*"></span>)*\s*)<h([1-6])'
)
_HEADERLINK = '<a class="headerlink"'
_THEME_MACROS = ("_static/webpack-macros.html", "_static/sbt-webpack-macros.html")


def finish(site: Path) -> list[str]:
    """Mark the built pages for Pagefind and index them (:func:`search_index`); return the
    broken internal links, if any (the index is not written then).

    Each page's article is what Pagefind indexes (not the menus, not the ``#`` after each
    heading); each section's id moves to its heading, where Pagefind looks for the anchors of
    its sub-results. The theme's Jinja macros, copied as static files and used by no page,
    are removed (Pagefind would warn about them).
    """
    for macros in _THEME_MACROS:
        (site / macros).unlink(missing_ok=True)
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        head, article, body = text.partition(_ARTICLE)
        if not article:
            continue
        body = _SECTION_HEADING.sub(r'<section>\2<h\3 id="\1"', body)
        body = body.replace(_HEADERLINK, f"{_HEADERLINK} data-pagefind-ignore")
        page.write_text(f"{head}{article} data-pagefind-body{body}", encoding="utf-8")
    broken = broken_links(site)
    if not broken:
        import asyncio

        asyncio.run(search_index(site))
    return broken


def error_entries(page: str) -> list[tuple[str, str, str]]:
    """(anchor, message, text) of each entry of the built error index (its ``<h2>``s)."""
    article = page.partition(_ARTICLE)[2].partition("</article>")[0]
    parts = re.split(r'<h2 id="([^"]+)"[^>]*>', article)
    entries = []
    for anchor, chunk in zip(parts[1::2], parts[2::2], strict=True):
        message, _, rest = chunk.partition("</h2>")
        entries.append((anchor, _text(message), _text(rest)))
    return entries


def _text(fragment: str) -> str:
    fragment = re.sub(r"<a class=\"headerlink\".*?</a>", "", fragment, flags=re.DOTALL)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment))).strip()


async def search_index(site: Path) -> None:
    """Write Pagefind's index of ``site`` into ``site/pagefind``: every page, and each entry of
    the error index as a result of its own (its anchor on the index page, its message as the
    title and first heading), so a search for a message finds its entry first."""
    from pagefind.index import IndexConfig, PagefindIndex

    config = IndexConfig(output_path=str((site / "pagefind").resolve()))
    index_page = ERROR_INDEX.replace(".md", ".html")
    async with PagefindIndex(config=config) as index:
        await index.add_directory(str(site.resolve()))
        for anchor, message, text in error_entries((site / index_page).read_text("utf-8")):
            # The message, weighted above the text: an entry that quotes another's message in
            # its own text (the Mac's placeholder entry quotes the same-device one) must not
            # outrank the entry whose title it is.
            record = (f'<html lang="en"><head><title>{html.escape(message)}</title></head>'
                      f'<body data-pagefind-body><h1 data-pagefind-weight="10">'
                      f"{html.escape(message)}</h1><p>{html.escape(text)}</p>"
                      "</body></html>")
            await index.add_html_file(content=record, url=f"/{index_page}#{anchor}")


class _Links(HTMLParser):
    """The ids and the hrefs of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if tag == "a" and name == "href" and value:
                self.hrefs.append(value)


def broken_links(site: Path) -> list[str]:
    """Every ``<a href>`` in ``site`` that goes to a missing page or a missing anchor, as
    'page -> href'. Links out of the site (with a scheme) are not checked."""
    parsed: dict[Path, _Links] = {}

    def read(page: Path) -> _Links:
        if page not in parsed:
            links = _Links()
            links.feed(page.read_text(encoding="utf-8"))
            parsed[page] = links
        return parsed[page]

    broken = []
    for page in sorted(site.rglob("*.html")):
        for href in read(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {href}")
            elif parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in read(target).ids:
                    broken.append(f"{page.relative_to(site)} -> {href}")
    return broken


if __name__ == "__main__":
    sys.exit(main())
