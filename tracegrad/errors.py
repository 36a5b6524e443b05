"""Error types shared across the package."""


class CheckError(RuntimeError):
    """check=True found a compiled result that differs from the interpret backend."""
