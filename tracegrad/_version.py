"""The version alone, so that modules below the package top can read it."""
__version__ = "0.1.0"
