"""Training tasks, registered in :data:`specjax.train.task.TASKS` on import."""

from specjax.train.tasks import eagle, hydra, medusa  # noqa: F401  (eagle3, eagle1, hydra, medusa)
