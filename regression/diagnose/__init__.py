"""Diagnosis of a change: bisect, explain and the module-call traces they compare."""
