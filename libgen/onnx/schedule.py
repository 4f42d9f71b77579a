"""Which kernel of a model to tune next: the gradient-based task scheduler of TVM's MetaSchedule
(src/meta_schedule/task_scheduler/gradient_based.cc, after Ansor's auto_scheduler), on model time.

A task is a kernel with the time its calls take in the model (`model_s`, as last profiled) and its
own time as the tuner measures it, one entry per round (`history`, the first the program that was
profiled). Its time in the model is estimated as `model_s` scaled by how much faster its best
program got since the profile. A round gives a few evaluations to the task whose expected gain in
model time is largest:

    gain = (alpha * (h[n-1-w] - h[n-1]) / w + (1 - alpha) * h[n-1] / n) * model_s / reference_s

the first term what it gained per round over the last `w` rounds (0 before it has had `w`), the
second the optimistic guess that n rounds have found 1/n of what is left; `model_s /
reference_s` turns its own seconds into the model's. With no round yet the gain is the task's
model time, so the slowest kernel is tuned first and the others follow as its gains fall: the
rounds a task gets grow with its share of the model's time. MetaSchedule starts with a round for
every task to learn where they stand; here the profile of the heuristic library says that, so a
small budget is not spread over kernels that hardly count. A task whose search ran out of
programs is `done` and gets no more rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

ALPHA = 0.2
WINDOW = 3


@dataclass(frozen=True)
class Task:
    kernel: str
    model_s: float  # its calls' time in the model when last profiled
    reference_s: float  # its own time (the tuner's) when last profiled
    history: tuple[float, ...]  # its best own time after each round, the first when first profiled
    evaluations: int = 0  # spent on it so far
    rounds: int = 0
    done: bool = False

    @property
    def best_s(self) -> float:
        return self.history[-1]

    @property
    def estimated_s(self) -> float:
        """Its calls' time in the model now, by the ratio of its own times."""
        return self.model_s * self.best_s / self.reference_s if self.reference_s > 0 else self.model_s

    def gain(self, alpha: float = ALPHA, window: int = WINDOW) -> float:
        """The model time a round is expected to save (see the module's docstring)."""
        h, n = self.history, len(self.history)
        recent = (h[n - 1 - window] - h[-1]) / window if n >= 1 + window else 0.0
        per_round = alpha * recent + (1 - alpha) * h[-1] / n
        return per_round * self.model_s / self.reference_s if self.reference_s > 0 else 0.0

    def after_round(self, best_s: float | None, evaluations: int) -> Task:
        """This task after a round that spent `evaluations` and found `best_s` (None: nothing that
        ran); a round that spent nothing leaves its search nothing to try."""
        best = self.best_s if best_s is None else min(self.best_s, best_s)
        return replace(self, history=(*self.history, best), evaluations=self.evaluations + evaluations,
                       rounds=self.rounds + 1, done=evaluations == 0)

    def profiled(self, model_s: float) -> Task:
        """This task after a profile of the model measured its calls at `model_s`."""
        return replace(self, model_s=model_s, reference_s=self.best_s)


def next_tasks(tasks: Sequence[Task], count: int = 1) -> list[int]:
    """The positions in `tasks` of the `count` tasks (fewer when fewer are left) to give a round
    to next, the largest expected gain first; ties go to the earlier task."""
    alive = [i for i, task in enumerate(tasks) if not task.done]
    return sorted(alive, key=lambda i: (-tasks[i].gain(), i))[:count]


def estimated_model_s(tasks: Sequence[Task], rest_s: float) -> float:
    """The model's time now: the tasks' estimates and `rest_s`, what is not tuned (ONNX Runtime,
    copies)."""
    return rest_s + sum(task.estimated_s for task in tasks)
