"""torch-regression: bit-exact regression tests of PyTorch models against a git revision.

Public API: the `regression` pytest fixture (see the README), the settings loader and the
error types. Importing this package imports neither torch nor pytest, and nothing heavy:
the pytest plugin loads in every pytest run of an environment that has it installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from regression.errors import RegressionError

if TYPE_CHECKING:
    from regression.config.settings import Settings, load_settings

__all__ = ["RegressionError", "Settings", "load_settings"]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """Settings and load_settings, imported on first use (they need PyYAML)."""
    if name in ("Settings", "load_settings"):
        from regression.config import settings

        return getattr(settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
