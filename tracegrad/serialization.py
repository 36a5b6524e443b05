"""tg.save / tg.load: tensors, state_dicts and nested containers in a file whose loading cannot run
code — a zip of .npy arrays (read with allow_pickle=False) and a JSON manifest describing the
containers. tg.load also reads PyTorch's torch.save zip files (data.pkl + data/<storage>) with a
restricted unpickler, as torch.load(weights_only=True) does, without importing torch; see
torch_format.py."""
import io
import json
import math
import os
import zipfile
from collections import OrderedDict

import numpy as np

from . import dtypes as D
from .backends.cuda.gpu import is_available as cuda_available
from .device import device as Device
from .tensor import Tensor, tensor as make_tensor

MANIFEST = "tracegrad/manifest.json"
FORMAT = "tracegrad.save"
VERSION = 1


def save(obj, f):
    """Write obj — a tensor, or dicts (OrderedDicts), lists and tuples of tensors, str, int, float,
    bool, None, dtypes and devices, nested — to f (a path or a binary file). Tensors keep dtype, shape, device and
    requires_grad; a tensor held twice is stored once and loads as one tensor."""
    arrays = []
    body = _encode(obj, arrays, {}, "obj")
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "object": body}, allow_nan=False)
    with _opened(f, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as z:
        z.writestr(MANIFEST, manifest)
        for i, arr in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)
            z.writestr(f"tracegrad/tensors/{i}.npy", buf.getvalue())


def _encode(o, arrays, seen, path):
    if o is None or isinstance(o, (bool, str)):
        return o
    if isinstance(o, int):
        return o
    if isinstance(o, float):
        return o if math.isfinite(o) else {"$": "float", "value": repr(o)}
    if isinstance(o, D.DType):
        return {"$": "dtype", "name": o.name}
    if isinstance(o, Device):
        return {"$": "device", "name": str(o)}
    if isinstance(o, Tensor):
        if id(o) not in seen:
            seen[id(o)] = len(arrays)
            arrays.append(np.array(o.detach().cpu().numpy(), order="C"))      # (ascontiguousarray makes 0-d 1-d)
        return {"$": "tensor", "index": seen[id(o)], "dtype": o.dtype.name, "device": str(o.device),
                "requires_grad": bool(o.requires_grad)}
    if isinstance(o, (list, tuple)) and not hasattr(o, "_fields"):
        return {"$": "list" if isinstance(o, list) else "tuple",
                "items": [_encode(v, arrays, seen, f"{path}[{i}]") for i, v in enumerate(o)]}
    if isinstance(o, dict):
        return {"$": "dict", "ordered": isinstance(o, OrderedDict),
                "items": [[_encode(k, arrays, seen, f"{path} key"), _encode(v, arrays, seen, f"{path}[{k!r}]")]
                          for k, v in o.items()]}
    raise TypeError(f"tg.save cannot store {path}, a {type(o).__module__}.{type(o).__name__}: only tensors, dicts, "
                    f"lists, tuples, str, int, float, bool, None, dtypes and devices are saved (no arbitrary objects, so that "
                    f"loading never runs code). Save the object's state_dict() instead")


def load(f, map_location=None, weights_only=True, **kwargs):
    """Read what tg.save wrote, or a PyTorch checkpoint written by torch.save (its tensors become
    tracegrad tensors). map_location: a device (or its name) for every tensor, or a dict mapping saved
    device names to new ones. Nothing in the file can run code: PyTorch's pickle is read by an
    unpickler that knows only tensor rebuilding and plain containers."""
    with _opened(f, "rb") as fh:
        data = fh.read()
    if not zipfile.is_zipfile(io.BytesIO(data)):
        legacy = data[:2] == b"\x80\x02" or data[:1] == b"\x80"
        raise RuntimeError(f"{_name(f)} is not a tracegrad or PyTorch checkpoint (not a zip file)" +
                           (": it looks like PyTorch's legacy pickle format (torch < 1.6 or "
                            "_use_new_zipfile_serialization=False), which tracegrad does not read; re-save it "
                            "with torch.save(obj, path) in a recent torch" if legacy else ""))
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        if MANIFEST in names:
            return _load_tracegrad(z, map_location)
        pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if pkl:
            from .torch_format import load_torch
            return load_torch(z, pkl[0][:-len("data.pkl")], lambda loc: _target(loc, map_location))
    raise RuntimeError(f"{_name(f)} is a zip file but neither a tracegrad checkpoint ({MANIFEST}) nor a PyTorch one "
                       f"(data.pkl)")


def _load_tracegrad(z, map_location):
    head = json.loads(z.read(MANIFEST))
    if head.get("format") != FORMAT or not isinstance(head.get("version"), int) or head["version"] > VERSION:
        raise RuntimeError(f"unsupported checkpoint format {head.get('format')!r} version {head.get('version')!r} "
                           f"(this tracegrad reads {FORMAT} up to version {VERSION})")
    cache = {}

    def array(i):
        with z.open(f"tracegrad/tensors/{int(i)}.npy") as fh:
            return np.load(io.BytesIO(fh.read()), allow_pickle=False)
    return _decode(head["object"], array, cache, map_location)


def _decode(o, array, cache, map_location):
    if not isinstance(o, dict):
        if isinstance(o, list):
            raise RuntimeError("malformed tracegrad checkpoint: a bare list in the manifest")
        return o
    kind = o.get("$")
    if kind == "float":
        return float(o["value"])
    if kind == "dtype":
        return D.to_dtype(o["name"])
    if kind == "device":
        return Device(o["name"])
    if kind == "tensor":
        i = o["index"]
        if i not in cache:
            dtype = D.to_dtype(o["dtype"])
            cache[i] = make_tensor(array(i), dtype=dtype, device=_target(o["device"], map_location),
                                   requires_grad=bool(o["requires_grad"]))
        return cache[i]
    if kind in ("list", "tuple"):
        items = [_decode(v, array, cache, map_location) for v in o["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        pairs = [(_decode(k, array, cache, map_location), _decode(v, array, cache, map_location)) for k, v in o["items"]]
        return OrderedDict(pairs) if o.get("ordered") else dict(pairs)
    raise RuntimeError(f"malformed tracegrad checkpoint: unknown entry kind {kind!r}")


def _target(saved, map_location):
    """The device a tensor saved on `saved` loads onto."""
    if map_location is None:
        dev = Device(saved)
    elif isinstance(map_location, dict):
        dev = Device(map_location.get(saved, saved))
    elif isinstance(map_location, (str, Device)):
        dev = Device(map_location)
    else:
        raise TypeError(f"map_location must be a device, a device name or a dict of device names, got "
                        f"{type(map_location).__name__}")
    if dev.type == "cuda" and not cuda_available():
        raise RuntimeError(f"Attempting to deserialize a tensor saved on {saved} but tg.cuda.is_available() is False. "
                           f"If you are running on a CPU-only machine, use tg.load(f, map_location='cpu') to load "
                           f"the tensors onto the cpu")
    return dev


class _opened:
    """A path opened in `mode`, or a file object passed through (not closed)."""

    def __init__(self, f, mode):
        self.f, self.mode, self.own = f, mode, isinstance(f, (str, bytes, os.PathLike))

    def __enter__(self):
        self.fh = open(self.f, self.mode) if self.own else self.f
        return self.fh

    def __exit__(self, *exc):
        if self.own:
            self.fh.close()


def _name(f):
    return repr(os.fspath(f)) if isinstance(f, (str, bytes, os.PathLike)) else "the file"
