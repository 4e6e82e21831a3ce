"""One pytest plugin object per mode of a run: collect, record or check.

`regression.plugin` registers exactly one of them; their hooks are methods.
"""
