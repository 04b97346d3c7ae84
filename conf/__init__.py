"""Configuration shared by Sphinx, nox and the tests (see settings.py, vocab.toml, claims.toml)."""
