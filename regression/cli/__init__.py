"""The command line: invoke tasks, `torch-regression init` and its entry point."""
