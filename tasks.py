"""Invoke tasks of this repository: `invoke --list`."""

from regression.tasks import ns

__all__ = ["ns"]
