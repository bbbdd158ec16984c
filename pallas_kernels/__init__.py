"""Pallas kernels (installed as specjax.pallas_kernels)."""
