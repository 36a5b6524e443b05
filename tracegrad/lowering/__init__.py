"""Target-free program planning shared by every backend: buffer slots and in-place pairs (slots.py),
which intermediates share memory (buffers.py), and the disk cache of compiled code (cache.py)."""
