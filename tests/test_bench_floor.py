"""The bench's floors (floor.py, streams.py): the bytes each memory-bound workload must move, from its shapes;
the stream kernels' values; the floor table's arithmetic. No timing is asserted."""
import numpy as np
import pytest

from tracegrad.bench import Result
from tracegrad.bench.floor import Floor, floor_lines, floor_setup, measure
from tracegrad.bench.streams import ITEM, STEP, Pass, Streams, Traffic, beyond_l3, last_level_cache
from tracegrad.bench.workload_base import Workload
from tracegrad.bench.workloads import find


def test_each_workloads_bytes_come_from_its_shapes():
    """W1, W2: read x, write y; W3: read x and g, write dx; W7: read x twice, write dx."""
    for wid, arrays, reads_of_x in (("W1", 2, 1), ("W2", 2, 1), ("W3", 3, 1), ("W7", 3, 2)):
        w = find(wid)
        inp = w.inputs()
        t = w.traffic(inp)
        assert t.n == inp["x"].size and t.nbytes == arrays * inp["x"].nbytes, wid
        assert sum(p.reads.count("x") for p in t.passes) == reads_of_x, wid
        if wid == "W3":
            assert inp["g"].shape == inp["x"].shape and t.passes == (Pass(("x", "g"), ("dx",)),)
    assert find("W1").traffic(find("W1").inputs()).nbytes == 2 * 4_194_304 * 4
    assert find("W7").traffic(find("W7").inputs()).nbytes == 3 * 8192 * 512 * 4
    assert find("W4").traffic is None and find("W12").traffic is None


def test_beyond_l3_keeps_the_passes_on_arrays_four_times_the_cache():
    t = Traffic(1024, (Pass(("x",)), Pass(("x",), ("dx",))))
    far = beyond_l3(t)
    assert far.passes == t.passes and far.n % STEP == 0 and far.n * ITEM >= 4 * last_level_cache()
    assert far.nbytes == 3 * far.n * ITEM


def test_last_level_cache_reads_the_largest_cache_in_sysfs(tmp_path):
    for i, size in enumerate(("32K", "1024K", "32768K")):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert last_level_cache(str(tmp_path)) == 32 << 20
    assert last_level_cache(str(tmp_path / "missing")) == 32 << 20       # the fallback


def test_stream_passes_compute_what_they_say():
    """A pass writes the sum of its reads to each write; a pass without writes sums into the sink, whose 16-lane
    partial sums per chunk add up to the whole sum; threads split the same elements."""
    n = STEP * 7
    for nontemporal in (False, True):
        for chunks in (1, 2, 3):
            s = Streams(Traffic(n, (Pass(("x", "g"), ("dx", "y")),)))
            s.buffers["x"][:] = np.arange(n)
            s.buffers["g"][:] = 0.5
            s.run(nontemporal, chunks)
            np.testing.assert_array_equal(s.buffers["dx"], np.arange(n) + 0.5)
            np.testing.assert_array_equal(s.buffers["y"], np.arange(n) + 0.5)
    s = Streams(Traffic(n, (Pass(("x",)),)))
    s.buffers["x"][:] = np.arange(n) % 5
    s.sink[:] = 0
    s.run(False, 3)
    assert s.sink.sum() == (np.arange(n) % 5).sum()
    with pytest.raises(ValueError, match=f"a multiple of {STEP} is needed"):
        Streams(Traffic(n + 16, (Pass(("x",)),)))


def test_measure_times_one_and_more_threads_both_store_kinds_and_says_what_the_floor_is():
    n = 16 * STEP
    w = Workload("Wx", "toy", "", lambda: {"x": np.ones(n, np.float32)}, None)
    w.traffic = lambda inp: Traffic(inp["x"].size, (Pass(("x",), ("y",)),))
    w.compute_floor = lambda inp: (lambda: inp["x"].sum())
    logged = []
    f = measure([w, Workload("Wy", "no floor", "", None, None)], log=logged.append, rounds=1)["Wx"]
    assert {k[1] for k in f.own} == {"normal", "non-temporal"} and 1 in {k[0] for k in f.own}
    assert set(f.far) == set(f.own) and f.far_traffic.n > n
    assert f.memory == min(f.own.values()) and f.seconds == max(f.memory, f.compute)
    assert abs(f.gbs - 2 * n * ITEM / f.memory / 1e9) < 1e-9
    assert len(logged) == 1 and "MB" in logged[0] and "GB/s" in logged[0] and "compute" in logged[0]


def test_floor_lines_give_time_over_the_larger_floor():
    w = find("W1")
    f = Floor()
    f.traffic = Traffic(4_194_304, (Pass(("x",), ("y",)),))
    f.far_traffic = beyond_l3(f.traffic)
    f.own = {(1, "normal"): f.traffic.nbytes / 5e9, (2, "non-temporal"): f.traffic.nbytes / 10e9}   # best 10 GB/s
    f.far = {(1, "normal"): f.far_traffic.nbytes / 4e9}
    assert "10.0 GB/s (2 threads, non-temporal stores); 1 thread, normal stores 5.0" in f.describe()
    assert "cache: 4.0 GB/s" in f.describe() and f"{f.traffic.nbytes / 4e9 * 1e3:.3f} ms" in f.describe()
    assert f.describe().startswith("33.6 MB must move: read x, write y (16.8 MB each)")
    res = {"numpy": Result(), "tg eager": Result(), "tg compiled": Result()}
    res["numpy"].times = [f.memory * 3]                           # 3x the bandwidth floor
    res["tg eager"].times = [f.memory / 2]                        # faster than the floor: it read low
    res["tg compiled"].failure = "broken"
    cols = ["numpy", "tg eager", "tg compiled"]
    lines = floor_lines([(w, res), (find("W4"), res)], cols, 14, {"W1": f})
    assert "best stream of its passes" in lines[0] and len(lines) == 3      # W4 has no floor
    assert lines[2].startswith("W1 gelu_fwd") and "   33.6" in lines[2] and " 10.0" in lines[2]
    assert "3.00x" in lines[2] and "below" in lines[2] and lines[2].rstrip().endswith("-")
    f.compute = f.memory * 2                                      # compute-bound: the floor doubles
    assert "1.50x" in floor_lines([(w, res)], cols, 14, {"W1": f})[2]


def test_floor_copies_move_the_workloads_bytes():
    for threaded in (True, False):
        assert floor_setup(1 << 20, threaded)() == []            # 512 KiB read, 512 KiB written
