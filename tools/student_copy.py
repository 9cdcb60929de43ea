"""Write the student copy of the collection: everything a learner uses, no solutions.

For a class, point nbgitpuller links and the notebooks' Colab and Binder badges at this copy
(pushed to the class's own repository), never at the full repository: that one holds
``labs/solutions/`` and the tests, whose tables of right answers solve every exercise
(docs/teaching.md, "A student copy without solutions"). Usage::

    python -m tools.student_copy DEST                        # a new folder
    python -m tools.student_copy DEST --update               # refresh it (keeps DEST/.git)
    python -m tools.student_copy DEST --repository https://github.com/our-class/lessons

``--repository`` (and ``--branch``) make the copy's badges, links and Colab install line name
the class's repository instead of this one. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Not in the student copy: solutions, the tests (their tables of right answers solve every
#: exercise), CI, and the teacher's tools and guide.
LEFT_OUT = [
    "labs/solutions/*",
    "tests/*",
    ".ci/*",
    "docs/teaching.md",
    "requirements-teacher.txt",
    "tools/classroom.py",
    "tools/nbgrader_cells.py",
    "tools/build_labs.py",
    "tools/student_copy.py",
]
NOTE = (
    "> **Student copy.** This is the learners' copy of the collection: the labs' solutions, "
    "the tests and the teacher's tools are not included.\n\n"
)


def files(root: Path = ROOT) -> list[str]:
    """The collection's files (git's tracked files; or every file outside hidden and
    virtual-environment folders when there is no git), relative to ``root``."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                                check=True).stdout.decode().split("\0")
        names = [name for name in listed if name and (root / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        names = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                 and not any(part.startswith(".") or part in ("my-work", "__pycache__")
                             for part in p.relative_to(root).parts[:-1])]
    return sorted(name for name in names if not left_out(name))


def left_out(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in LEFT_OUT)


def write(dest: Path, repository: str | None = None, branch: str | None = None,
          update: bool = False, root: Path = ROOT) -> list[str]:
    """Write the student copy into ``dest``; return the files written."""
    dest = dest.resolve()
    if dest == root or root in dest.parents:
        raise SystemExit(f"{dest} is inside the collection: choose a folder outside it")
    if dest.exists() and any(p.name != ".git" for p in dest.iterdir()):
        if not update:
            raise SystemExit(f"{dest} is not empty: pass --update to refresh a student copy")
        for entry in dest.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    with open(root / "pyproject.toml", "rb") as handle:
        ours = tomllib.load(handle)["tool"]["lessons"]
    replacements = []
    if repository:
        replacements.append((ours["repository"].removeprefix("https://github.com/"),
                             repository.removeprefix("https://github.com/").rstrip("/")))
        replacements.append((ours["repository"], repository.rstrip("/")))
    if branch and branch != ours["branch"]:
        replacements += [(f"@{ours['branch']}", f"@{branch}"),
                         (f"/{ours['branch']}/", f"/{branch}/"),
                         (f"branch = \"{ours['branch']}\"", f"branch = \"{branch}\"")]
    written = files(root)
    for name in written:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        source = root / name
        if replacements and source.suffix in (".ipynb", ".md", ".toml", ".py", ".yml"):
            text = source.read_text(encoding="utf-8")
            for old, new in sorted(set(replacements), key=lambda r: -len(r[0])):
                text = text.replace(old, new)
            target.write_text(text, encoding="utf-8")
        else:
            shutil.copy2(source, target)
    readme = dest / "README.md"
    if readme.exists():
        readme.write_text(NOTE + readme.read_text(encoding="utf-8"), encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="the folder to write (new, or --update)")
    parser.add_argument("--update", action="store_true",
                        help="replace an earlier student copy in DEST (its .git is kept)")
    parser.add_argument("--repository", help="the class's repository, for badges and links")
    parser.add_argument("--branch", help="its branch (default: this collection's)")
    args = parser.parse_args(argv)
    written = write(args.dest, args.repository, args.branch, args.update)
    print(f"wrote {len(written)} files to {args.dest} (no labs/solutions/, no tests/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
