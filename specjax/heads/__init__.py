"""Trained draft heads (inference side): modules, configs and checkpoint files. Training lives
in ``specjax.train``; nothing here imports optax or grain."""
