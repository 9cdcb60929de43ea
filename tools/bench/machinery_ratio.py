"""Lines of machinery per line of lesson code, so that its growth is visible (docs/runs.md).

    python -m tools.bench.machinery_ratio

Machinery: every .py file under labchecks/ (the graders), tools/ and tests/. Lesson code: the
code cells of the lesson notebooks (notebooks/NN_topic.ipynb; the generated navigation and
setup-helpers cells left out) and utils/, the helpers they call. Lines are physical lines, blank
ones and docstrings included (what a maintainer reads); the same counts without blank lines
are printed beside them. Labs are neither: they are exercises, not machinery or lesson.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tools import build_nav, lessons

MACHINERY = ("labchecks", "tools", "tests")
LESSON_PACKAGES = ("utils",)


def main() -> int:
    counts = {name: python_lines(lessons.ROOT / name) for name in MACHINERY + LESSON_PACKAGES}
    counts["notebooks (code cells)"] = notebook_code_lines(lessons.lesson_notebooks())
    machinery = [counts[name] for name in MACHINERY]
    lesson = [counts[name] for name in (*LESSON_PACKAGES, "notebooks (code cells)")]
    print(f"{'':24} {'lines':>7} {'non-blank':>10}")
    for name, (all_lines, non_blank) in counts.items():
        print(f"{name:24} {all_lines:>7} {non_blank:>10}")
    total_machinery = tuple(map(sum, zip(*machinery, strict=True)))
    total_lesson = tuple(map(sum, zip(*lesson, strict=True)))
    print(f"{'machinery':24} {total_machinery[0]:>7} {total_machinery[1]:>10}")
    print(f"{'lesson code':24} {total_lesson[0]:>7} {total_lesson[1]:>10}")
    print(f"machinery per line of lesson code: {total_machinery[0] / total_lesson[0]:.2f} "
          f"({total_machinery[1] / total_lesson[1]:.2f} without blank lines)")
    return 0


def python_lines(folder: Path) -> tuple[int, int]:
    """(lines, non-blank lines) of every .py file under ``folder``."""
    lines = [line for path in sorted(folder.rglob("*.py"))
             for line in path.read_text(encoding="utf-8").splitlines()]
    return len(lines), sum(1 for line in lines if line.strip())


def notebook_code_lines(paths: list[Path]) -> tuple[int, int]:
    """(lines, non-blank lines) of the code cells of ``paths``, generated cells left out."""
    lines = []
    for path in paths:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            tags = set(cell.get("metadata", {}).get("tags", []))
            if cell["cell_type"] == "code" and not tags & build_nav.GENERATED_TAGS:
                source = cell["source"]
                lines += ("".join(source) if isinstance(source, list) else source).splitlines()
    return len(lines), sum(1 for line in lines if line.strip())


if __name__ == "__main__":
    sys.exit(main())
