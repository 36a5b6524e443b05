"""tg.save / tg.load: round trips of tensors and nested containers, a format whose loading runs no
code, and PyTorch checkpoints — one written here by hand in torch.save's zip layout (CI has no
torch) and one made by torch 2.13 (tests/data/torch_checkpoint.pt, see make_torch_checkpoint.py)."""
import io
import math
import pathlib
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg

DATA = pathlib.Path(__file__).parent / "data"


def _round_trip(obj, **kw):
    buf = io.BytesIO()
    tg.save(obj, buf)
    buf.seek(0)
    return tg.load(buf, **kw)


def test_state_dict_and_containers_round_trip(tmp_path):
    m = tg.nn.Sequential(tg.nn.Linear(3, 2), tg.nn.Linear(2, 1))
    m.register_buffer("count", tg.tensor(5))
    w = m[0].weight
    obj = {"model": m.state_dict(), "step": 7, "lr": 1e-3, "bad": float("inf"), "nan": float("nan"),
           "trail": [1, (2.5, None, True, "s")], 4: "int key", (1, 2): "tuple key",
           "p": w, "again": w, "h": tg.tensor([1.5, -2.0], dtype=tg.float16), "b": tg.tensor([True, False]),
           "i8": tg.tensor([-3, 4], dtype=tg.int8), "empty": tg.zeros(0, 3), "scalar": tg.tensor(2.5, dtype=tg.float64),
           "dtype": tg.float16, "device": tg.device("cuda:0")}
    path = tmp_path / "ckpt.tg"
    tg.save(obj, path)
    back = tg.load(str(path))
    assert list(back) == list(obj) and type(back["model"]) is OrderedDict and list(back["model"]) == list(m.state_dict())
    assert back["trail"] == [1, (2.5, None, True, "s")] and back[4] == "int key" and back[(1, 2)] == "tuple key"
    assert back["bad"] == math.inf and math.isnan(back["nan"]) and type(back["step"]) is int
    assert back["p"] is back["again"] and back["p"].requires_grad and back["p"].is_leaf
    assert back["dtype"] is tg.float16 and back["device"] == "cuda:0"
    for k in ("h", "b", "i8", "empty", "scalar"):
        assert back[k].dtype == obj[k].dtype and back[k].shape == obj[k].shape
        np.testing.assert_array_equal(back[k].numpy(), obj[k].numpy())
    m2 = tg.nn.Sequential(tg.nn.Linear(3, 2), tg.nn.Linear(2, 1))
    m2.register_buffer("count", tg.tensor(0))
    m2.load_state_dict(back["model"])
    x = tg.randn(4, 3)
    np.testing.assert_array_equal(m2(x).detach().numpy(), m(x).detach().numpy())
    assert int(m2.count) == 5


@settings(max_examples=40, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-2 ** 62, 2 ** 62) | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) |
                    st.dictionaries(st.text(max_size=3) | st.integers(-5, 5), inner, max_size=3), max_leaves=12))
def test_plain_values_round_trip(obj):
    assert _round_trip(obj) == obj


def test_map_location_and_views():
    base = tg.arange(12.0).reshape(3, 4)
    back = _round_trip({"col": base[:, 1], "t": base.T}, map_location="cpu")
    np.testing.assert_array_equal(back["col"].numpy(), [1.0, 5.0, 9.0])
    np.testing.assert_array_equal(back["t"].numpy(), base.numpy().T)
    assert _round_trip(base, map_location={"cpu": "cpu"}).device == "cpu"
    with pytest.raises(TypeError, match="map_location"):
        _round_trip(base, map_location=3)


def test_refuses_objects_and_other_files(tmp_path):
    with pytest.raises(TypeError, match="cannot store obj\\['m'\\], a tracegrad.nn.modules.Linear.*state_dict"):
        tg.save({"m": tg.nn.Linear(2, 2)}, io.BytesIO())
    (tmp_path / "x.pkl").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(RuntimeError, match="not a zip file\\): it looks like PyTorch's legacy pickle"):
        tg.load(tmp_path / "x.pkl")
    z = io.BytesIO()
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("readme.txt", "hi")
    z.seek(0)
    with pytest.raises(RuntimeError, match="neither a tracegrad checkpoint"):
        tg.load(z)


# ---------------------------------------------------------------- torch.save's layout, written by hand
class _Global:
    """A reference to a module-level name, pickled as GLOBAL without importing it."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):
        raise AssertionError("never called")


class _Call:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


class _Storage:
    def __init__(self, kind, key, array):
        self.kind, self.key, self.array = kind, key, array


class _TorchPickler(pickle._Pickler):
    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, _Global):
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
            return
        super().save(obj, save_persistent_id)

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", _Global("torch", obj.kind), obj.key, "cpu", obj.array.size)
        return None


def _torch_zip(obj, storages, archive="archive"):
    buf = io.BytesIO()
    _TorchPickler(buf, protocol=2).dump(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(f"{archive}/data.pkl", buf.getvalue())
        z.writestr(f"{archive}/byteorder", "little")
        for s in storages:
            z.writestr(f"{archive}/data/{s.key}", s.array.astype(s.array.dtype.newbyteorder("<")).tobytes())
        z.writestr(f"{archive}/version", "3\n")
    out.seek(0)
    return out


def _rebuild(storage, offset, size, stride, requires_grad=False):
    return _Call(_Global("torch._utils", "_rebuild_tensor_v2"), storage, offset, tuple(size), tuple(stride),
                 requires_grad, _Call(_Global("collections", "OrderedDict")))


def test_reads_a_hand_written_torch_checkpoint():
    grid = _Storage("DoubleStorage", "0", np.arange(12, dtype=np.float64))
    longs = _Storage("LongStorage", "1", np.array([5, -7, 9], dtype=np.int64))
    halves = _Storage("HalfStorage", "2", np.array([0.5, -1.0], dtype=np.float16))
    state = _Call(_Global("collections", "OrderedDict"), [
        ("w", _Call(_Global("torch._utils", "_rebuild_parameter"), _rebuild(grid, 0, (3, 4), (4, 1)), True,
                    _Call(_Global("collections", "OrderedDict")))),
        ("col", _rebuild(grid, 2, (3,), (4,))),              # a strided view: column 2
        ("t", _rebuild(grid, 0, (4, 3), (1, 4))),            # a transpose
        ("n", _rebuild(longs, 1, (), ())),
        ("h", _rebuild(halves, 0, (2,), (1,))),
        ("meta", {"epoch": 3, "betas": (0.9, 0.99), "size": _Call(_Global("torch", "Size"), (2, 3)),
                  "dtype": _Global("torch", "float16"), "device": _Call(_Global("torch", "device"), "cpu")}),
    ])
    sd = tg.load(_torch_zip(state, [grid, longs, halves]))
    assert list(sd) == ["w", "col", "t", "n", "h", "meta"]
    assert sd["w"].requires_grad and sd["w"].dtype == tg.float64
    np.testing.assert_array_equal(sd["w"].detach().numpy(), np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(sd["col"].numpy(), [2.0, 6.0, 10.0])
    np.testing.assert_array_equal(sd["t"].numpy(), np.arange(12.0).reshape(3, 4).T)
    assert sd["n"].dtype == tg.int64 and sd["n"].shape == () and int(sd["n"]) == -7
    assert sd["h"].dtype == tg.float16 and sd["h"].numpy().tolist() == [0.5, -1.0]
    assert sd["meta"] == {"epoch": 3, "betas": (0.9, 0.99), "size": (2, 3), "dtype": tg.float16, "device": "cpu"}


def test_cuda_storages_need_a_device_or_map_location():
    s = _Storage("FloatStorage", "0", np.array([1.0, 2.0], np.float32))

    class _OnCuda(_TorchPickler):
        def persistent_id(self, obj):
            pid = super().persistent_id(obj)
            return pid and pid[:3] + ("cuda:0",) + pid[4:]
    buf = io.BytesIO()
    _OnCuda(buf, protocol=2).dump({"x": _rebuild(s, 0, (2,), (1,))})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("a/data.pkl", buf.getvalue())
        z.writestr("a/data/0", s.array.tobytes())
    out.seek(0)
    assert tg.load(out, map_location="cpu")["x"].tolist() == [1.0, 2.0]
    out.seek(0)
    assert tg.load(out, map_location={"cuda:0": "cpu"})["x"].device == "cpu"
    if not tg.cuda.is_available():
        out.seek(0)
        with pytest.raises(RuntimeError, match="saved on cuda:0 but tg.cuda.is_available\\(\\) is False.*map_location='cpu'"):
            tg.load(out)


@pytest.mark.parametrize("module,name", [("os", "system"), ("builtins", "eval"), ("torch.nn", "Linear"),
                                         ("numpy.core.multiarray", "_reconstruct")])
def test_torch_checkpoint_with_other_globals_is_refused(module, name):
    bad = _torch_zip({"x": _Call(_Global(module, name), "echo pwned")}, [])
    with pytest.raises(pickle.UnpicklingError, match=f"refers to {module}.{name}, which tg.load does not load"):
        tg.load(bad)


def test_torch_checkpoint_storage_bounds_checked():
    s = _Storage("FloatStorage", "0", np.zeros(4, np.float32))
    with pytest.raises(pickle.UnpicklingError, match="does not fit its storage of 4 elements"):
        tg.load(_torch_zip({"x": _rebuild(s, 2, (3,), (1,))}, [s]))


# ---------------------------------------------------------------- a file torch 2.13 wrote
def test_reads_a_torch_made_checkpoint_and_resumes_training():
    with pytest.warns(UserWarning, match="bfloat16 tensor .* loaded as float32"):
        ck = tg.load(DATA / "torch_checkpoint.pt")
    ex = ck["extras"]
    assert ex["epoch"] == 3 and ex["name"] == "run-1" and ex["betas"] == (0.9, 0.999) and ex["none"] is None
    assert ex["half"].dtype == tg.float16 and ex["half"].numpy().tolist() == [1.5, -2.0]
    assert ex["bf16"].dtype == tg.float32 and ex["bf16"].numpy().tolist() == [3.0, 0.15625]
    assert ex["flags"].dtype == tg.bool and ex["ints"].dtype == tg.int32 and ex["ints"].tolist() == [7, -3]
    assert ex["column"].dtype == tg.float64 and ex["column"].tolist() == [1.0, 5.0, 9.0]
    assert ex["param"].requires_grad and ex["param"].tolist() == [4.0]
    sd = ck["model"]
    assert list(sd) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                        "1.num_batches_tracked"]
    # torch 2.13's running statistics after one training batch (make_torch_checkpoint.py prints them)
    np.testing.assert_allclose(sd["1.running_mean"].numpy(), [0.22874999046325684, -0.37937498092651367])
    np.testing.assert_allclose(sd["1.running_var"].numpy(), [1.0320311784744263, 1.2611327171325684])
    assert sd["1.num_batches_tracked"].dtype == tg.int64 and int(sd["1.num_batches_tracked"]) == 1
    lin = tg.nn.Linear(3, 2)
    lin.load_state_dict({"weight": sd["0.weight"], "bias": sd["0.bias"]})
    opt = tg.optim.Adam(lin.parameters(), lr=0.5)
    opt.load_state_dict(ck["optimizer"])                 # torch's Adam state: step 1, its moments, lr 0.1
    assert opt.param_groups[0]["lr"] == 0.1
    x, y = tg.tensor([[1.0, -1.0, 0.5]]), tg.tensor([[0.3, -0.7]])
    opt.zero_grad()
    ((lin(x) - y) ** 2).mean().backward()
    opt.step()
    # torch 2.13 after its second Adam step from the same state
    np.testing.assert_allclose(lin.weight.detach().numpy(), [[0.30296480655670166, -0.052964791655540466, 0.8029648065567017],
                                                             [1.8013451099395752, 0.32365480065345764, -1.6986548900604248]],
                               rtol=1e-6)
    np.testing.assert_allclose(lin.bias.detach().numpy(), [-0.09703519940376282, -0.3986548185348511], rtol=1e-6)
