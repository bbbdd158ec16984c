"""Training tasks, registered in :data:`specjax.train.task.TASKS` on import."""

from specjax.train.tasks import eagle, medusa  # noqa: F401  (register eagle3, eagle1, medusa)
