"""Training tasks, registered in :data:`specjax.train.task.TASKS` on import."""

from specjax.train.tasks import eagle  # noqa: F401  (registers eagle3, eagle1)
