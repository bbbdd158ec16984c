"""specjax.policies"""
