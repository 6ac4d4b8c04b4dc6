"""The suites: every module here that defines SUITE is one (`ext4lazy bench list` shows them)."""
import importlib
import pkgutil


def all_suites():
    out = {}
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"{__name__}.{m.name}")
        s = getattr(mod, "SUITE", None)
        if s is not None:
            out[s.name] = s
    return out
