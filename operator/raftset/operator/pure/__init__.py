"""The operator's decisions: pure functions over plain data, no I/O library imported (tests/unit/test_layout.py)."""
