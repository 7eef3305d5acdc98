"""What `lpattn info` prints, as an object (docs/python.md §3)."""

from . import _lpattn
from ._threads import get_num_threads


class Info:
    """The library version, Highway targets, native paths, products and threads.

    Fields: version, targets_compiled, targets_supported, target_chosen, native (a list of
    dicts: name, compiled, cpu, enabled, note), products (one line per operand kind) and
    threads (what the next call uses). str() gives `lpattn info`'s lines for the kernels.
    """

    def __init__(self):
        raw = _lpattn.info()
        self.version = raw["version"]
        self.targets_compiled = list(raw["targets_compiled"])
        self.targets_supported = list(raw["targets_supported"])
        self.target_chosen = raw["target_chosen"]
        self.native = [dict(entry) for entry in raw["native"]]
        self.products = list(raw["products"])
        self.threads = get_num_threads()

    def _names(self, field):
        names = [entry["name"] for entry in self.native if entry[field]]
        return " ".join(names) if names else "none"

    def __str__(self):
        lines = [
            f"lpattn {self.version}",
            f"highway targets compiled:  {' '.join(self.targets_compiled)}",
            f"highway targets supported: {' '.join(self.targets_supported)}",
            f"highway target chosen:     {self.target_chosen}",
            f"native paths compiled:     {self._names('compiled')}",
            f"native paths on this CPU:  {self._names('cpu')}",
            f"native paths enabled:      {self._names('enabled')}",
        ]
        lines += [f"  {e['name']}: {e['note']}" for e in self.native if e["note"]]
        lines.append("products:")
        lines += [f"  {line}" for line in self.products]
        lines.append(f"threads:                   {self.threads}")
        return "\n".join(lines)

    def __repr__(self):
        return f"lpattn.Info(version={self.version!r}, target_chosen={self.target_chosen!r}, " \
               f"threads={self.threads})"


def info():
    """What `lpattn info` prints: targets, native paths, products and the thread count."""
    return Info()
