"""What a function's code reads from outside its arguments: the globals and closure variables it
names (nested code included) and its default argument values (the guards and the state walk both
start from them)."""
import types


def free_objects(fn):
    """(kind, name, holder, object) for the globals and closure variables that `fn`'s code (nested
    code included) reads."""
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        return []
    codes, names = [fn.__code__], set()
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    out = [("global", n, fn.__globals__, fn.__globals__[n]) for n in sorted(names) if n in fn.__globals__]
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        out.append(("closure variable", n, cell, cell_value(cell)))
    out += [("default value of", n, fn, v) for n, v in defaults(fn).items()]
    return out


def defaults(fn):
    """{parameter: default value} of a function (read when a call leaves the parameter out)."""
    code, pos = fn.__code__, fn.__defaults__ or ()
    names = code.co_varnames[code.co_argcount - len(pos):code.co_argcount]
    return dict(zip(names, pos), **(fn.__kwdefaults__ or {}))


def cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:       # an empty cell
        return None
