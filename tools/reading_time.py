"""Estimate how long a notebook takes to read: its main flow, and everything in it.

The estimate is a plain sum over what a reader meets, with these constants:

- prose: ``WORDS_PER_MINUTE`` words a minute. A word is a whitespace-separated token with a
  letter or digit in it, after dropping HTML tags and comments, link targets (``[text](url)``
  keeps ``text``), images and bare URLs. Fenced code in markdown counts as code lines.
- code: ``SECONDS_PER_CODE_LINE`` for each non-blank line (reading it, matching it to the prose,
  running it).
- outputs: ``SECONDS_PER_OUTPUT`` for each output a cell shows (text, a result, an error),
  ``SECONDS_PER_FIGURE`` for an image. Consecutive pieces of one stream (stdout, stderr) are one
  output, as Jupyter shows them: how a kernel happens to split its prints between messages
  changes nothing.
- quizzes (code cells starting ``utils.quiz(``, whose source is collapsed): ``SECONDS_PER_QUIZ``
  each, for reading the question, thinking and answering; their source is not counted.
- predictions asked in prose (a markdown cell that asks, as :data:`tools.workspace.ASKS` finds
  it: "**Predict, then run.**", "Predict what happens, ..."): the same pause as a quiz, once per
  question (a quiz right after its question is that question's pause; its words still count).
- the generated badge/navigation cells (tags ``nav-header``, ``nav-footer``) count nothing.

The *main flow* is what a first read meets with every collapsible part closed. It leaves out:

- whatever is inside ``<details>`` in a markdown cell (the ``<summary>`` line stays);
- a section whose heading starts with one of ``OPTIONAL_HEADINGS`` ("Going deeper",
  "On a CPU-only machine"): every cell after its heading up to the next heading of the same or
  a higher level (the cells JupyterLab hides when the heading is collapsed). The heading itself
  stays, as a ``<summary>`` does: a closed fold shows its title, and a reader reads it to
  decide to skip (:func:`fold_titles`). A heading inside a closed fold is hidden with it;
- a cell tagged with one of ``OPTIONAL_TAGS`` (``going-deeper``, ``cpu-only``);
- the source of a code cell collapsed with ``metadata.jupyter.source_hidden`` (its outputs
  stay), and outputs collapsed with ``metadata.jupyter.outputs_hidden``.

*Everything* counts all of it.

The same main flow gives a second measure: the visible ``assert`` lines per main-flow
code line (:func:`assert_share`; at most ``ASSERT_SHARE_LIMIT``, 5%). A fact stays asserted in a
check cell (tag ``CHECK_TAG``, ``hidden-check``) right below the cell that shows it; make nav
folds it, so its lines are in neither the reading time nor the share.

Why these constants: they are fitted to what first readers took. Nine readers' main-flow
minutes, each notebook read cold in one sitting with folds closed (00 17, 01 19, 02 22, 03 27,
04 24, 05 27, 06 35, 07 38, 08 43), against each notebook's tally at the commit they read: a
least-squares fit of the seconds per word and per code line, with the output, figure and quiz
costs held at 15, 30 and 60 seconds, gives 178 words a minute and 11.0 s a code line, rounded
here to 180 and 11. Every notebook's estimate is then within 11% of its readers' minutes, and
00-06 add up to 171 minutes, as the readers' did. A code line costs more than reading it: a
first reader matches it to the prose, runs it and reads what it printed. The fit, its residuals
and the earlier constants (150 words a minute, 5 s a line: 30% optimistic) are in
docs/runs.md ("Reading times"); refit there when a new round of readers reports minutes.
Predictions asked in prose count since the round of 2026-12-02: its readers paused at each one
as at a quiz, and 08, with eight and no quiz, took them 36 minutes against an estimate of 28
that left them out (docs/runs.md). The titles of closed "Going deeper" and "On a CPU-only
machine" sections count since a reader of 07 counted about 1,700 main-flow words where the
estimate had about 1,470: 07 then showed 13 such titles (113 words) that it left out, while
it counted every closed ``<details>``'s summary (docs/runs.md, "Reading times").

Used by tools/build_nav.py (the README table's "Read" column) and tests/repo/test_reading_time.py.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tools import lessons
from tools.workspace import ASKS

WORDS_PER_MINUTE = 180
SECONDS_PER_CODE_LINE = 11
SECONDS_PER_OUTPUT = 15
SECONDS_PER_FIGURE = 30
SECONDS_PER_QUIZ = 60
MAIN_FLOW_LIMIT_MINUTES = 30

NAV_TAGS = {"nav-header", "nav-footer"}
OPTIONAL_TAGS = {"going-deeper", "cpu-only"}
OPTIONAL_HEADINGS = ("going deeper", "on a cpu-only machine")

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_DETAILS_PARTS = re.compile(
    r"(<details\b[^>]*>|</details\s*>|<summary\b[^>]*>|</summary\s*>)", re.IGNORECASE
)


@dataclass(frozen=True)
class Tally:
    """What a reader meets: prose words, code lines, outputs, figures, quizzes, predictions."""

    words: int = 0
    code_lines: int = 0
    outputs: int = 0
    figures: int = 0
    quizzes: int = 0
    predictions: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.words + other.words,
            self.code_lines + other.code_lines,
            self.outputs + other.outputs,
            self.figures + other.figures,
            self.quizzes + other.quizzes,
            self.predictions + other.predictions,
        )

    @property
    def seconds(self) -> float:
        """The reading time of this tally, in seconds, with the module's constants."""
        return (
            self.words * 60 / WORDS_PER_MINUTE
            + self.code_lines * SECONDS_PER_CODE_LINE
            + self.outputs * SECONDS_PER_OUTPUT
            + self.figures * SECONDS_PER_FIGURE
            + (self.quizzes + self.predictions) * SECONDS_PER_QUIZ
        )

    @property
    def minutes(self) -> int:
        """The reading time rounded up to whole minutes (0 only for nothing to read)."""
        return math.ceil(self.seconds / 60)


@dataclass(frozen=True)
class Estimate:
    """A notebook's reading time: ``main`` (first read, collapsible parts closed) and ``all``."""

    main: Tally
    all: Tally

    def text(self) -> str:
        """'25 / 40 min': main flow / everything, as the README table shows it."""
        return f"{self.main.minutes} / {self.all.minutes} min"


def _prose_and_code(markdown: str) -> Tally:
    """Count the prose words and fenced code lines of a piece of markdown."""
    words = code_lines = 0
    in_fence = False
    prose = []
    for line in markdown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif in_fence:
            code_lines += bool(line.strip())
        else:
            prose.append(line)
    text = "\n".join(prose)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)  # images
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", " ", text)  # HTML tags
    text = re.sub(r"https?://\S+", " ", text)
    words = sum(1 for token in text.split() if re.search(r"\w", token))
    return Tally(words=words, code_lines=code_lines)


def _split_details(markdown: str) -> tuple[str, str]:
    """Split markdown into (what shows with every <details> closed, what is inside them)."""
    shown, hidden = [], []
    depth = 0
    in_summary = False
    for part in _DETAILS_PARTS.split(markdown):
        lower = part.lower()
        if lower.startswith("<details"):
            depth += 1
        elif lower.startswith("</details"):
            depth = max(depth - 1, 0)
        elif lower.startswith("<summary"):
            in_summary = True
        elif lower.startswith("</summary"):
            in_summary = False
        # A summary shows when its own <details> sits in visible text (depth 1).
        elif depth == 0 or (in_summary and depth == 1):
            shown.append(part)
        else:
            hidden.append(part)
    return "\n".join(shown), "\n".join(hidden)


def headings(markdown: str) -> list[tuple[int, str]]:
    """The (level, text) of each markdown heading outside code fences and <details>."""
    shown, _ = _split_details(markdown)
    found, in_fence = [], False
    for line in shown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (match := _HEADING.match(line.strip())):
            found.append((len(match.group(1)), match.group(2)))
    return found


def is_optional_heading(text: str) -> bool:
    plain = re.sub(r"[*_`]", "", text).strip().lower()
    plain = re.sub(r"^[\d.]+\s*", "", plain)  # "5. Going deeper" numbered like any section
    return plain.startswith(OPTIONAL_HEADINGS)


def _outputs(cell: dict) -> Tally:
    outputs = figures = 0
    previous_stream = None
    for output in cell.get("outputs", []):
        stream = output.get("name") if output.get("output_type") == "stream" else None
        if stream is not None and stream == previous_stream:
            continue  # one block on screen: Jupyter joins consecutive prints to one stream
        previous_stream = stream
        if any(kind.startswith("image/") for kind in output.get("data", {})):
            figures += 1
        else:
            outputs += 1
    return Tally(outputs=outputs, figures=figures)


def _cell(cell: dict) -> tuple[Tally, Tally]:
    """Return (main-flow tally, tally of what is collapsed) of one cell read on its own."""
    metadata = cell.get("metadata", {})
    jupyter = metadata.get("jupyter", {})
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else source
    if cell.get("cell_type") == "markdown":
        shown, hidden = _split_details(source)
        return _prose_and_code(shown), _prose_and_code(hidden)
    if cell.get("cell_type") != "code":
        return Tally(), Tally()
    if source.lstrip().startswith("utils.quiz("):
        return Tally(quizzes=1), Tally()  # the quiz's cost covers its question and buttons
    code = Tally(code_lines=sum(1 for line in source.splitlines() if line.strip()))
    outputs = _outputs(cell)
    main, collapsed = Tally(), Tally()
    if jupyter.get("source_hidden"):
        collapsed += code
    else:
        main += code
    if jupyter.get("outputs_hidden"):
        collapsed += outputs
    else:
        main += outputs
    return main, collapsed


def estimate_cells(cells: list[dict]) -> Estimate:
    """Return the reading-time ``Estimate`` of a list of notebook cells (nbformat 4 dicts)."""
    main, everything = Tally(), Tally()
    walked = list(_walk_with_titles(cells))
    for index, (cell, tags, source, folded, title) in enumerate(walked):
        shown, collapsed = _cell(cell)
        following = walked[index + 1][2] if index + 1 < len(walked) else ""
        if (cell.get("cell_type") == "markdown" and ASKS.search(_split_details(source)[0])
                and not following.lstrip().startswith("utils.quiz(")):
            shown += Tally(predictions=1)
        everything += shown + collapsed
        if not folded and not tags & OPTIONAL_TAGS:
            main += shown
        elif title is not None:  # a closed fold's title stays on screen
            main += Tally(words=_prose_and_code(title).words)
    return Estimate(main=main, all=everything)


def walk(cells: list[dict]):
    """Yield ``(cell, tags, source, folded)`` for each cell but the navigation ones;
    ``folded`` is True inside an optional section ("Going deeper", "On a CPU-only machine",
    up to the next heading of the same or a higher level), its heading cell included."""
    for cell, tags, source, folded, _title in _walk_with_titles(cells):
        yield cell, tags, source, folded


def fold_titles(cells: list[dict]) -> list[str]:
    """The titles a first read meets of the optional sections in ``cells``, in order: each
    heading that closes a fold in JupyterLab and is not itself inside a closed fold."""
    return [title for *_, title in _walk_with_titles(cells) if title is not None]


def _walk_with_titles(cells: list[dict]):
    """:func:`walk`, with a fifth item: the text of the optional heading that this cell opens,
    when a reader sees it with every fold closed (it is the cell's first heading, and no fold
    around it hides it), else None."""
    optional_level = None  # the level of the optional section we are in, if any
    for cell in cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & NAV_TAGS:
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        title = None
        if cell.get("cell_type") == "markdown":
            for position, (level, text) in enumerate(headings(source)):
                if is_optional_heading(text):
                    if optional_level is None or level <= optional_level:
                        optional_level = level
                        if position == 0:
                            title = text
                elif optional_level is not None and level <= optional_level:
                    optional_level = None
        yield cell, tags, source, optional_level is not None, title


def estimate(path: Path, text: str | None = None) -> Estimate:
    """Return the reading-time ``Estimate`` of the notebook at ``path`` (or of its ``text``).

    Raises :class:`NotRunError` for a notebook whose code cells hold no stored outputs (as
    ``tools.notebook_text from-text`` leaves it): outputs count, so its figure would be wrong."""
    try:
        notebook = json.loads(Path(path).read_text(encoding="utf-8") if text is None else text)
        cells = notebook["cells"]
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{path}: cannot read it as a notebook ({error})") from None
    if not has_run(cells):
        raise NotRunError(path)
    return estimate_cells(cells)


class NotRunError(ValueError):
    """A notebook with no stored outputs: its reading time cannot be estimated yet."""

    def __init__(self, path: Path):
        try:
            name = Path(path).resolve().relative_to(lessons.ROOT).as_posix()
        except ValueError:
            name = str(path)
        super().__init__(
            f"{name} has no stored outputs (none of its code cells has run), and its reading "
            "time counts them: run it first, then this again: "
            f"`make check NB={name}` (or `python -m tools.run_notebooks {name}`)"
        )
        self.path = path


def has_run(cells: list[dict]) -> bool:
    """True when a code cell, navigation cells aside, holds an output or an execution count;
    also True for a notebook without code cells, which has nothing to run."""
    code = [cell for cell, _tags, _source, _folded in walk(cells)
            if cell.get("cell_type") == "code"]
    return not code or any(cell.get("outputs") or cell.get("execution_count") for cell in code)


#: Tag of a check cell: facts a lesson asserts, kept out of a first read. It opens
#: folded (``metadata.jupyter.source_hidden``; tools/build_nav.py sets that for every cell with
#: the tag) and prints nothing. Put it right below the cell whose lesson it checks.
CHECK_TAG = "hidden-check"

#: Most visible ``assert`` lines allowed per main-flow code line (at most 5%).
ASSERT_SHARE_LIMIT = 0.05

_ASSERT = re.compile(r"^\s*assert\b")


@dataclass(frozen=True)
class AssertShare:
    """Visible ``assert`` lines among the code lines a first read meets."""

    asserts: int
    code_lines: int

    @property
    def share(self) -> float:
        return self.asserts / self.code_lines if self.code_lines else 0.0

    def text(self) -> str:
        """'3 / 120 (2.5%)'."""
        return f"{self.asserts} / {self.code_lines} ({self.share:.1%})"


def assert_share_cells(cells: list[dict]) -> AssertShare:
    """Count the visible asserts and code lines of the main flow of ``cells``.

    The main flow is the one :func:`estimate_cells` counts: a collapsed source (a check cell,
    tagged :data:`CHECK_TAG`), an optional section or tag and a quiz are not in it.
    """
    asserts = lines = 0
    for cell, tags, source, folded in walk(cells):
        hidden = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden")
        if (cell.get("cell_type") != "code" or tags & OPTIONAL_TAGS or hidden
                or folded or source.lstrip().startswith("utils.quiz(")):
            continue
        code = [line for line in source.splitlines() if line.strip()]
        lines += len(code)
        asserts += sum(1 for line in code if _ASSERT.match(line))
    return AssertShare(asserts, lines)


def assert_share(path: Path) -> AssertShare:
    """:func:`assert_share_cells` of the notebook at ``path``."""
    return assert_share_cells(json.loads(Path(path).read_text(encoding="utf-8"))["cells"])


def main() -> int:
    """Print each lesson notebook's estimate, with what it counted."""
    print(
        f"constants: {WORDS_PER_MINUTE} words/min, {SECONDS_PER_CODE_LINE} s/code line, "
        f"{SECONDS_PER_OUTPUT} s/output, {SECONDS_PER_FIGURE} s/figure, {SECONDS_PER_QUIZ} s/quiz"
    )
    total_main = total_all = 0
    for path in lessons.lesson_notebooks():
        result = estimate(path)
        total_main += result.main.minutes
        total_all += result.all.minutes
        flag = "  OVER" if result.main.seconds > MAIN_FLOW_LIMIT_MINUTES * 60 else ""
        share = assert_share(path)
        over = "  ASSERTS" if share.share > ASSERT_SHARE_LIMIT else ""
        print(f"{path.name:34} {result.text():>14}   main {result.main}{flag}")
        print(f"{'':34} {'':>14}   visible asserts {share.text()}{over}")
    print(f"{'total':34} {f'{total_main} / {total_all} min':>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
