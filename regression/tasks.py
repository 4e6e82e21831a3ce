"""The invoke tasks' import path that users write in their tasks.py:
`from regression.tasks import ns`."""

from __future__ import annotations

from regression.cli.tasks import ns

__all__ = ["ns"]
