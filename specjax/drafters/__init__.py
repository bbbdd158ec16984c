"""specjax.drafters"""
