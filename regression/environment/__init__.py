"""What changes the bits: the key of an environment, its packages, the harness files, and
the determinism settings a process applies."""
