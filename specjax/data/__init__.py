"""specjax.data"""
