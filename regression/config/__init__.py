"""The settings: config.yaml read, checked and typed; where it and the cache folder are."""
