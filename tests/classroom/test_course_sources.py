"""tools/classroom.py's course sources: a teacher's edits are kept, the grader is hidden,
the release has no self-study header, and the config says what a class needs."""

from __future__ import annotations

from pathlib import Path

import nbformat

from tools import classroom, lessons

ROOT = Path(__file__).resolve().parents[2]

LAB = next(p for p in lessons.solution_labs() if p.name.startswith("02"))


def test_an_edited_source_is_kept_unless_forced_and_then_backed_up(tmp_path):
    target = tmp_path / "source" / LAB.stem / LAB.name
    assert classroom.write_sources(tmp_path, [LAB]) == []
    assert classroom.write_sources(tmp_path, [LAB]) == []  # unchanged: rewritten silently
    edited = target.read_text(encoding="utf-8").replace("Lab 02", "Lab 02 (spring term)")
    target.write_text(edited, encoding="utf-8")
    assert classroom.write_sources(tmp_path, [LAB]) == [target]
    assert target.read_text(encoding="utf-8") == edited
    assert classroom.write_sources(tmp_path, [LAB], force=True) == []
    assert "spring term" not in target.read_text(encoding="utf-8")
    backups = list(target.parent.glob("*.bak"))
    assert len(backups) == 1 and "spring term" in backups[0].read_text(encoding="utf-8")


def test_every_test_cell_starts_with_the_hidden_grader_worth_the_labs_points(tmp_path):
    source = classroom.source_notebook(LAB)
    graded = [c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert [c.metadata.nbgrader["points"] for c in graded] == [1, 2, 3, 2, 1]
    for cell in graded:
        assert cell.source.startswith("### BEGIN HIDDEN TESTS")
        assert str(classroom.GRADER) in cell.source
        assert f", {cell.metadata.nbgrader['points']}," in cell.source
        assert classroom.released(nbformat.from_dict({"cells": [cell]}))[0][2].startswith(
            "checks.check_")
    header = source.cells[0].source
    assert header.startswith("**Graded assignment.**") and "](../" not in header
    assert not any("](../" in c.source for c in source.cells)


def test_the_config_has_a_short_timeout_restores_deleted_cells_and_keeps_files_out(tmp_path):
    classroom.write_sources(tmp_path, [LAB])
    config = (tmp_path / "nbgrader_config.py").read_text(encoding="utf-8")
    assert "c.ExecutePreprocessor.timeout = 60" in config
    assert "look for a loop that never ends" in config
    assert "c.OverwriteCells.add_missing_cells = True" in config
    assert "'checkpoints'" in config and "'*.pt'" in config
    compile(config, "nbgrader_config.py", "exec")
