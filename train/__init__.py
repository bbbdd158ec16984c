"""Training pipelines (installed as specjax.train)."""
