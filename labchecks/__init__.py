"""Checks for the labs: each one names the misconception behind a wrong answer.

A check takes the learner's function (or value), runs it on small real inputs, and
returns a :class:`Feedback`, displayed as one line: passed (a short confirmation),
failed (what happened, the misconception behind it, what to do), or not attempted
(the exercise still raises ``NotImplementedError``). One module per lab; the labs
import their own module (``from labchecks import lab02 as checks``), then call ``checks.check_...``.
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
from labchecks.lab07 import check_adam_bytes, check_fast_training, check_largest_batch
from labchecks.lab08 import (
    check_fill_model,
    check_load_weights,
    check_move_batch,
    check_run_split,
    check_save_tied,
)
from labchecks.lab09 import check_rank_aware_load, check_save_on_rank_zero, check_setup_device
from labchecks.lab10 import check_load_sharded

__all__ = [
    "CLASS_WEIGHTS",
    "FAILED",
    "Feedback",
    "IS_QUESTIONS",
    "MysteryNet",
    "NOT_ATTEMPTED",
    "PASSED",
    "check_adam_bytes",
    "check_atomic_save",
    "check_compiled_checkpoint",
    "check_ddp_checkpoint",
    "check_device_agnostic_model",
    "check_fast_training",
    "check_fill_model",
    "check_gpu_checkpoint",
    "check_is_predictions",
    "check_largest_batch",
    "check_load_weights",
    "check_model_and_optimizer",
    "check_move_batch",
    "check_predict",
    "check_prepare",
    "check_resume",
    "check_run_split",
    "check_save_tied",
    "check_train_step",
    "check_trainable",
    "check_training_setup",
    "check_where_is_it_now",
    "check_whole_model",
    "mystery_net",
    "tiny_training",
    "train_epoch",
]

# Each check is marked @graded where it is defined (labchecks/grading.py): under nbgrader, and
# only there, it returns the verdict of the grader hidden in its test cell. Importing a lab's
# checks also shows nbgrader's cell timeout as a message a learner can read.
from labchecks.grading import explain_cell_timeouts  # noqa: E402

explain_cell_timeouts()
