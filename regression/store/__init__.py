"""Storage: the tensor codec, self-verifying files, cache entries and their inventory."""
