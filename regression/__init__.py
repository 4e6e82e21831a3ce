"""torch-regression: bit-exact regression tests of PyTorch models against a git revision.

Public API: the `regression` pytest fixture (see the README), the settings loader and the
error types. Importing this package imports neither torch nor pytest.
"""

from __future__ import annotations

from .config import Settings, load_settings
from .errors import RegressionError

__all__ = ["RegressionError", "Settings", "load_settings"]
__version__ = "0.1.0"
