"""The error index as code: which entry of docs/errors.md answers an error (from 04).

``explain(error)`` takes an exception, or the text of a message you paste, and returns (and
shows) the entry of the error index that answers it: its title, the usual fix, and links to the
full entry and to the notebook cell where it happens live; ``None`` when the index does not cover
it. ``explain_errors()`` shows that entry under every traceback of the notebook you call it in.
Both read docs/errors.toml, the catalogue docs/errors.md is generated from.
"""

from __future__ import annotations

import functools
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from utils.text import strip_ansi

#: Where the full entries are published: the repository's docs/errors.md (the same as
#: pyproject.toml's [tool.lessons]; a test keeps the two equal).
REPOSITORY = "https://github.com/device-placement/pytorch-device-lessons"
BRANCH = "main"


def explain(error_or_message: BaseException | str, show: bool = True) -> Explanation | None:
    """Return the error index's entry for an exception or a pasted message, or ``None``.

    With ``show`` (the default) it is also displayed: as Markdown in a notebook, as text
    elsewhere. Introduced in 04_cross_device_errors.
    """
    message = (error_or_message if isinstance(error_or_message, str)
               else f"{type(error_or_message).__name__}: {error_or_message}")
    entry = best_entry(message)
    if entry is None:
        return None
    found = Explanation.of(entry, message)
    if show:
        _display(found)
    return found


def explain_errors(shell: Any = None) -> None:
    """Show the error index's entry under every traceback in this IPython kernel.

    The traceback itself is unchanged; an error the index does not cover shows nothing more.
    Calling it again changes nothing; outside IPython it does nothing. Returns None, so a
    setup cell ending with it prints nothing. Introduced in 04_cross_device_errors; the labs
    turn it on in their setup cell.
    """
    shell = shell if shell is not None else _shell()
    if shell is None or getattr(shell, "_explain_errors_on", False):
        return

    def show_traceback_then_entry(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        try:
            explain(value)
        except Exception:  # noqa: BLE001 - the hook must never hide the learner's own error
            pass

    shell.set_custom_exc((Exception,), show_traceback_then_entry)
    shell._explain_errors_on = True


@dataclass(frozen=True)
class Explanation:
    """One entry of the error index, as ``explain`` shows it."""

    id: str
    title: str
    usual: str  # the usual fix in a line (markdown); may be empty
    entry_url: str  # the full entry in docs/errors.md
    live: tuple[tuple[str, str], ...]  # (where it happens live, its link), at most two
    first: str = ""  # the triage branch this very message fits, shown before the usual fix

    @classmethod
    def of(cls, entry: dict, message: str = "") -> Explanation:
        page = f"{REPOSITORY}/blob/{BRANCH}/docs/errors.md"
        usual = entry.get("usual", "") or _first_fix(entry)
        usual = re.sub(r"\]\(#([a-z0-9-]+)\)", rf"]({page}#\1)", " ".join(usual.split()))
        live = tuple((_where_label(where), _where_url(where)) for where in entry["where"][:2])
        first = " ".join(_branch_for(entry, message).split())
        first = re.sub(r"\]\(#([a-z0-9-]+)\)", rf"]({page}#\1)", first)
        return cls(entry["id"], entry["title"], usual, f"{page}#{entry['id']}", live, first)

    def markdown(self) -> str:
        lines = [f"**The error index:** [{self.title}]({self.entry_url})"]
        if self.first:
            lines.append(f"**First:** {self.first}")
        if self.usual:
            lines.append(f"**Usual fix:** {self.usual}")
        if self.live:
            lines.append("**Watch it happen:** "
                         + "; ".join(f"[{label}]({url})" for label, url in self.live))
        return "\n\n".join(lines)

    def text(self) -> str:
        lines = [f"The error index: {self.title}", f"  {self.entry_url}"]
        if self.first:
            first = re.sub(r"\[([^\]]*)\]\(([^)]*)\)", r"\1 (\2)", self.first)  # a link: text (url)
            lines.append("First: " + first.replace("`", "").replace("**", ""))
        if self.usual:
            plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", self.usual).replace("`", "")
            lines.append(f"Usual fix: {plain}")
        lines += [f"Watch it happen: {label} ({url})" for label, url in self.live]
        return "\n".join(lines)

    def _ipython_display_(self) -> None:
        """Shown as a cell's result: as Markdown, unless ``explain`` showed it in this cell."""
        shell = _shell()
        if shell is not None and _SHOWN_IN_CELL.get(id(self)) == shell.execution_count:
            return
        _display(self, mark=False)

    def __str__(self) -> str:
        return self.text()


# --- matching a message to an entry ---------------------------------------------------------

_DEVICES = re.compile(r"\b(?:cuda|mps|xpu|meta|cpu|hip|npu)(?::\d+)?\b")
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")
_EXCEPTION_NAMES = re.compile(r"^(?:[\w.]*(?:error|exception|warning)\w*:\s*)+")
#: How many characters of a message's start identify it (cut at a word boundary).
KEY_LENGTH = 60


def normalize(text: str) -> str:
    """A message as the matcher compares it: lower case, devices written ``<dev>``, numbers
    ``<n>``, runs of whitespace one space, terminal colours removed."""
    text = strip_ansi(text).lower()
    text = _DEVICES.sub("<dev>", text)
    text = _NUMBERS.sub("<n>", text)
    return " ".join(text.split())


def keys(entry: dict) -> list[str]:
    """The phrases that identify an entry's message: its ``match`` list when it has one, else the
    first words of each message and older wording (exception names left out)."""
    if entry.get("match"):
        return [normalize(phrase) for phrase in entry["match"]]
    found = []
    for message in entry.get("messages", []) + entry.get("older_wordings", []):
        start = _EXCEPTION_NAMES.sub("", normalize(message)).split(" ... ")[0]
        if len(start) > KEY_LENGTH:
            start = start[:KEY_LENGTH].rsplit(" ", 1)[0]
        found.append(start)
    return found


def best_entry(message: str) -> dict | None:
    """The entry whose longest identifying phrase occurs in ``message``; None when none does,
    or when the message also holds a phrase of the entry's ``unless`` list."""
    text = normalize(message)
    best, best_length = None, 0
    for entry in catalogue():
        if any(normalize(phrase) in text for phrase in entry.get("unless", [])):
            continue
        length = max((len(key) for key in keys(entry) if key and key in text), default=0)
        if length > best_length:
            best, best_length = entry, length
    return best


# --- the catalogue, and links -----------------------------------------------------------------


def catalogue_path() -> Path:
    """Where docs/errors.toml is: in the repository around this package, or (installed from the
    repository, as on Colab) the copy inside the package."""
    here = Path(__file__).resolve().parent
    for path in (here.parent / "docs" / "errors.toml", here / "errors.toml"):
        if path.is_file() and path.read_bytes()[:1] == b"#":
            return path
    raise FileNotFoundError(
        "utils.explain needs the error index, docs/errors.toml, and found neither "
        f"{here.parent / 'docs' / 'errors.toml'} nor {here / 'errors.toml'}. Install utils from "
        "the course's repository (on Colab: run the notebook's first cell again), or read "
        f"{REPOSITORY}/blob/{BRANCH}/docs/errors.md")


@functools.cache
def catalogue() -> tuple[dict, ...]:
    """The error index's entries, in the order of docs/errors.toml."""
    with catalogue_path().open("rb") as file:
        return tuple(entry for entry in tomllib.load(file)["entry"]
                     if entry.get("messages") or entry.get("symptom"))


#: Two different GPUs in one message (``cuda:1 and cuda:0``): most often a model split over
#: GPUs by ``device_map="auto"``, not a batch left behind.
_TWO_GPUS = re.compile(r"cuda:(\d+) and cuda:(?!\1\b)\d+")


def _branch_for(entry: dict, message: str) -> str:
    """The entry's triage branches for a message naming two different GPUs (with `device_map`:
    the split model's; without: a bare "cuda"), joined; its "Older form" branch for the older
    `Expected object of device type` wording (from `triage` or `more`); or "" for any other
    message."""
    given = entry.get("triage", [])
    branches = [given] if isinstance(given, str) else list(given)
    branches += entry.get("more", [])  # the rarer signs, shown under the messages
    if "expected object of device type" in message.lower():
        return next((b for b in branches if b.startswith("Older form")), "")
    if not _TWO_GPUS.search(message.lower()):
        return ""
    return " ".join(b for b in branches if b.split("->")[0].startswith("Two GPUs named"))


def _first_fix(entry: dict) -> str:
    """An entry's usual fix when it gives none: its first line of code, or its fix's sentence."""
    causes = entry.get("cause", [])
    fix = causes[0]["fix"] if causes else entry.get("fix", "")
    fenced = re.search(r"```\w*\n(.*?)\n", fix)
    if causes or fenced:
        line = (fenced.group(1) if fenced else fix.strip().splitlines()[0]).split("  #")[0]
        return f"`{line.strip()}`"
    return " ".join(fix.split())


def _heading_text(markdown: str) -> str:
    text = re.sub(r"<[^>]+>", "", markdown)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return text.replace("`", "").replace("**", "").strip()


def _where_label(where: dict) -> str:
    stem = Path(where["notebook"]).stem
    if where.get("heading"):
        return f"{stem[:2]} · {_heading_text(where['heading'])}"
    return f"{stem[:2]} · {stem[3:].replace('_', ' ')}"


def _where_url(where: dict) -> str:
    """The notebook section on the repository (the anchor JupyterLab and GitHub give it)."""
    url = f"{REPOSITORY}/blob/{BRANCH}/{where['notebook']}"
    if where.get("heading"):
        anchor = quote(_heading_text(where["heading"]).replace(" ", "-"),
                       safe="-.:,=!'_~*;&+$@/")
        url += f"#{anchor}"
    return url


#: The cell (IPython's execution count) in which ``explain`` showed each explanation, so that
#: the same explanation returned as the cell's result is not shown twice.
_SHOWN_IN_CELL: dict[int, int] = {}


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _display(found: Explanation, mark: bool = True) -> None:
    shell = _shell()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        from IPython.display import Markdown, display

        display(Markdown(found.markdown()))
    else:
        print(found.text())
    if shell is not None and mark:
        _SHOWN_IN_CELL.clear()
        _SHOWN_IN_CELL[id(found)] = shell.execution_count
