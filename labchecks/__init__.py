"""Checks for the labs: each one names the misconception behind a wrong answer.

A check takes the learner's function (or value), runs it on small real inputs, and
returns a :class:`~labchecks.feedback.Feedback`, displayed as one line: passed (a short
confirmation), failed (what happened, the misconception behind it, what to do), or not
attempted (the exercise still raises ``NotImplementedError``).

One module per lab, ``labchecks/labNN.py``; the labs import their own
(``from labchecks import lab02 as checks``), then call ``checks.check_...``, and so do the
tests. This package re-exports nothing, and importing any of its modules changes nothing else.
The teacher's side: labchecks/grading.py (what nbgrader scores) and labchecks/tamper.py (is the
code that grades the code on disk?).
"""
