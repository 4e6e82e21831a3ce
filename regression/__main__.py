"""`python -m regression init`: the same as the `torch-regression` command."""

from regression.cli.main import main

raise SystemExit(main())
