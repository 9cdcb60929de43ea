"""The text every helper shows: byte sizes, tables, and the first line of an error.

Every table a helper prints goes through :func:`columns` (text) and :func:`table_html` or
:func:`marked_table_html` (HTML), so all tables look alike.

``format_bytes`` and ``cleaned_error`` are introduced in 05_save_load_scenarios.
"""

from __future__ import annotations

import html
import math
import re

_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")
# Terminal escape codes (colour, bold) that PyTorch puts in some messages.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def format_bytes(count: float) -> str:
    """Return a size as a learner reads it: '0 bytes', '512 bytes', '4.0 KiB', '1.5 MiB'."""
    if count < 1024:
        return f"{count:.0f} bytes"
    power = min(int(math.log(count, 1024)), len(_UNITS) - 1)
    return f"{count / 1024**power:.1f} {_UNITS[power]}"


def strip_ansi(text: str) -> str:
    """Return ``text`` without terminal escape codes."""
    return _ANSI.sub("", text)


def cleaned_error(error: BaseException, limit: int | None = None) -> str:
    """Return ``TypeName: first line of the message``, without terminal colour codes.

    ``limit`` cuts a long line to about that many characters. Introduced in 05_save_load_scenarios.
    """
    text = strip_ansi(str(error)).strip()
    line = text.splitlines()[0].strip() if text else ""
    if limit is not None and len(line) > limit:
        line = line[: limit - 3].rstrip() + "..."
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def first_sentence(message: str) -> str:
    """Return the first sentence of a (long) PyTorch message, ending with a full stop."""
    line = message.strip().splitlines()[0] if message.strip() else "no message"
    return line.split(". ")[0].rstrip(".") + "."


def table_text(summary: str, header: tuple[str, ...], rows: list[tuple[str, ...]],
               total: int) -> str:
    """Return the summary, ``rows`` under ``header`` in columns, and how many were left out."""
    lines = [summary, *columns(header, rows)]
    if total > len(rows):
        lines.append(f"... and {total - len(rows)} more")
    return "\n".join(lines)


def table_html(summary: str, header: tuple[str, ...], rows: list[tuple[str, ...]],
               total: int) -> str:
    """Return the same table as :func:`table_text`, as HTML for Jupyter."""
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                    for row in rows)
    tail = f"<p>... and {total - len(rows)} more</p>" if total > len(rows) else ""
    return (f"<p><b>{html.escape(summary)}</b></p><table>"
            "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
            f"{cells}</table>{tail}")


def columns(header: tuple[str, ...], rows: list[tuple[str, ...]], rule: bool = False
            ) -> list[str]:
    """Return the lines of ``rows`` under ``header``, each column as wide as its widest cell,
    two spaces apart; with ``rule``, a line of dashes under the header. The text form of every
    table here (:func:`table_text`, ``utils.where``'s table)."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in table]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def marked_table_html(header: tuple[str, ...], rows: list[tuple[str, ...]],
                      marked: list[bool]) -> str:
    """Return ``rows`` under ``header`` as a left-aligned HTML table, each row whose ``marked``
    is True in bold red: what a reader must see first (``utils.where``'s tensors left
    behind by ``Module.to``, 03_module_to)."""
    left = "style='text-align:left'"
    head = "".join(f"<th {left}>{html.escape(h)}</th>" for h in header)
    body = []
    for row, mark in zip(rows, marked, strict=True):
        style = " style='color:#b00000;font-weight:bold'" if mark else ""
        cells = "".join(f"<td {left}>{html.escape(c)}</td>" for c in row)
        body.append(f"<tr{style}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

