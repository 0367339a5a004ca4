"""Storage backends: ``memory`` (embedded default) and ``sql`` (SQLAlchemy 2 async)."""
