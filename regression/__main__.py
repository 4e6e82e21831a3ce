"""`python -m regression init`: the same as the `torch-regression` command."""

from .cli import main

raise SystemExit(main())
