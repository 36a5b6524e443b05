"""What the host CPU offers that code generation chooses by (its features are part of every disk
cache key: engine.target_id)."""
_FEATURES = []


def features():
    """The host's CPU features as LLVM names them: {"avx2", "avx512f", ...} (those it has)."""
    if not _FEATURES:
        import llvmlite.binding as llvm
        _FEATURES.append(frozenset(f[1:] for f in llvm.get_host_cpu_features().flatten().split(",")
                                   if f.startswith("+")))
    return _FEATURES[0]


def vector_bytes():
    """Bytes in the widest vector register: 64 with AVX-512, 32 with AVX, 16 otherwise (SSE, NEON).
    Shuffles written wider than the registers are split by LLVM into many cross-register shuffles,
    slow to compile and to run (a 16 x 16 float32 register transpose on an AVX2 host: 0.47 s of
    instruction selection for one kernel, 13x the 8 x 8 one)."""
    have = features()
    return 64 if "avx512f" in have else 32 if "avx" in have else 16
