"""Checks for the labs: each one names the misconception behind a wrong answer.

A check takes the learner's function (or value), runs it on small real inputs, and
returns a :class:`Feedback`, displayed as one line: passed (a short confirmation),
failed (what happened, the misconception behind it, what to do), or not attempted
(the exercise still raises ``NotImplementedError``). One module per lab; the labs
use them as ``import labchecks as checks`` then ``checks.check_...``.
"""

from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED, Feedback
from labchecks.lab02 import (
    IS_QUESTIONS,
    check_is_predictions,
    check_model_and_optimizer,
    check_prepare,
    check_trainable,
    check_where_is_it_now,
)
from labchecks.lab04 import (
    CLASS_WEIGHTS,
    check_device_agnostic_model,
    check_predict,
    check_train_step,
    check_training_setup,
)
from labchecks.lab05 import (
    MysteryNet,
    check_compiled_checkpoint,
    check_ddp_checkpoint,
    check_gpu_checkpoint,
    check_whole_model,
    mystery_net,
)
from labchecks.lab06 import check_atomic_save, check_resume, tiny_training, train_epoch
from labchecks.lab07 import (
    LAB07_CLASS_WEIGHTS,
    check_adam_bytes,
    check_fast_training,
    check_largest_batch,
    exercise2_models,
    exercise3_model,
    lab07_data,
    lab07_model,
    train_slow,
)
from labchecks.lab08 import (
    check_load_sharded,
    check_rank_aware_load,
    check_save_on_rank_zero,
    check_setup_device,
    lab_model,
)

__all__ = [
    "CLASS_WEIGHTS",
    "FAILED",
    "Feedback",
    "IS_QUESTIONS",
    "LAB07_CLASS_WEIGHTS",
    "MysteryNet",
    "NOT_ATTEMPTED",
    "PASSED",
    "check_adam_bytes",
    "check_atomic_save",
    "check_compiled_checkpoint",
    "check_ddp_checkpoint",
    "check_device_agnostic_model",
    "check_fast_training",
    "check_gpu_checkpoint",
    "check_is_predictions",
    "check_largest_batch",
    "check_load_sharded",
    "check_model_and_optimizer",
    "check_predict",
    "check_prepare",
    "check_rank_aware_load",
    "check_resume",
    "check_save_on_rank_zero",
    "check_setup_device",
    "check_train_step",
    "check_training_setup",
    "check_trainable",
    "check_where_is_it_now",
    "check_whole_model",
    "exercise2_models",
    "exercise3_model",
    "lab07_data",
    "lab07_model",
    "lab_model",
    "mystery_net",
    "tiny_training",
    "train_epoch",
    "train_slow",
]

# Under nbgrader (and only there) a check returns the verdict of the grader hidden in its test
# cell, or raises when not passed where no grader ran (Validate): labchecks/grading.py.
from labchecks.grading import explain_cell_timeouts, make_checks_gradable  # noqa: E402

make_checks_gradable(globals())
explain_cell_timeouts()
