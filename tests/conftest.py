"""Test-wide settings: compiled code goes to a private disk cache, not the user's."""
import os
import tempfile

os.environ.setdefault("TRACEGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="tracegrad-test-cache-"))
