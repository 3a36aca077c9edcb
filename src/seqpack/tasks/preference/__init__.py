"""The ``preference`` task: one folder (records, layouts, the task, its objective)."""

from seqpack.tasks.preference.task import TASK, PreferenceOptions, PreferenceTask

__all__ = ["TASK", "PreferenceOptions", "PreferenceTask"]
