"""Checks for the labs: each one names the misconception behind a wrong answer.

One module per lab, ``labchecks/labNN.py``; a lab imports its own (``from labchecks import
lab02 as checks``) and calls ``checks.check_...``, and so do the tests. What every check shares
is in labchecks/feedback.py; the teacher's side is labchecks/grading.py (what nbgrader scores)
and labchecks/tamper.py. This package re-exports nothing, and importing it changes nothing.
"""
