"""Optional augmentation of a pairs store's training split: only the symmetries the user names.

Nothing is augmented unless asked: a user's puzzle may have no symmetries, and a wrong one
teaches wrong answers. `--aug N --transforms flip_rows,rot180 --permute 1,2,3,4,5,6` gives each
training pair N copies, each with one transform drawn from the identity and the named ones,
applied to input and output alike, and one random relabelling of the named symbols among
themselves (the same for input and output). The test split is never augmented.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trmkit.tasks.pairs.codec import Layout, Value

GRID_TRANSFORMS = {
    "flip_rows": lambda g: g[::-1],  # upside down
    "flip_cols": lambda g: g[:, ::-1],  # mirror image
    "rot180": lambda g: g[::-1, ::-1],
    "transpose": lambda g: g.T,
    "rot90": lambda g: np.rot90(g, 1),
    "rot270": lambda g: np.rot90(g, -1),
    "anti_transpose": lambda g: np.rot90(g, 2).T,
}
SWAPS_AXES = {"transpose", "rot90", "rot270", "anti_transpose"}
SHIFT = "shift"  # not drawn with the others: every copy is also placed at a random offset on the canvas
STRING_TRANSFORMS = {"reverse": lambda s: s[::-1]}


@dataclass(frozen=True)
class Augment:
    """What the user said is safe: copies per training pair, transforms, symbols to relabel."""

    copies: int
    transforms: tuple[str, ...] = ()
    permute: tuple[str, ...] = ()

    def describe(self) -> str:
        drawn = [t for t in self.transforms if t != SHIFT]
        parts = ([f"a transform from identity, {', '.join(drawn)}"] if drawn else []) + \
            (["a random place on the canvas (shift)"] if SHIFT in self.transforms else []) + \
            ([f"a relabelling of {' '.join(self.permute)}"] if self.permute else [])
        return (f"augmentation: {self.copies} copies per training pair, each with {' and '.join(parts)} "
                "(as named by --transforms/--permute); the test split is not augmented")


def parse_augment(copies: int, transforms: str | None, permute: str | None, layout: Layout) -> Augment | None:
    """The --aug/--transforms/--permute options checked against the store's kind and symbols."""
    names = tuple(t.strip() for t in (transforms or "").split(",") if t.strip())
    symbols = tuple(s.strip() for s in (permute or "").split(",") if s.strip())
    if copies < 0:
        raise ValueError(f"--aug must be >= 0, got {copies}")
    if not copies:
        if names or symbols:
            raise ValueError("--transforms and --permute describe augmented copies: give their number with --aug N")
        return None
    if not names and not symbols:
        raise ValueError("--aug N needs the symmetries that keep your answers right: --transforms and/or --permute")
    known = [*(GRID_TRANSFORMS if layout.kind == "grid" else STRING_TRANSFORMS), SHIFT]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--transforms {unknown}: a {layout.kind}'s transforms are {', '.join(known)}")
    if layout.kind == "grid" and SWAPS_AXES & set(names) and layout.canvas[0] != layout.canvas[1]:
        raise ValueError(f"--transforms {sorted(SWAPS_AXES & set(names))} turn rows into columns, and the canvas "
                         f"{layout.canvas[0]} x {layout.canvas[1]} is not square")
    missing = [s for s in symbols if s not in layout.vocab[1:]]
    if symbols and (missing or len(set(symbols)) < 2):  # --transforms alone names no symbol
        raise ValueError(f"--permute needs two or more distinct symbols of the data; {missing or symbols} "
                         f"(symbols: {' '.join(layout.vocab[1:21])})")
    return Augment(copies, names, tuple(dict.fromkeys(symbols)))


Copy = tuple[Value, Value, "tuple[int, ...] | None"]  # input, output, offset on the canvas (None: its start)


def copies_of(x: Value, y: Value, aug: Augment, rng: np.random.Generator,
              canvas: tuple[int, ...] = ()) -> list[Copy]:
    """`aug.copies` augmented versions of one pair; with `shift` named, each at a random offset on `canvas`
    (the same for input and output: a puzzle that fills the canvas stays where it is)."""
    out: list[Copy] = []
    drawn = tuple(t for t in aug.transforms if t != SHIFT)
    for _ in range(aug.copies):
        k = int(rng.integers(len(drawn) + 1))  # 0: the identity, as often as each named transform
        name = drawn[k - 1] if k else None
        relabel = dict(zip(aug.permute, rng.permutation(list(aug.permute)))) if aug.permute else {}
        a, b = _apply(x, name, relabel), _apply(y, name, relabel)
        at = tuple(int(rng.integers(c - n + 1)) for c, n in zip(canvas, a.shape)) if SHIFT in aug.transforms else None
        out.append((a, b, at))
    return out


def _apply(value: Value, name: str | None, relabel: dict[str, str]) -> Value:
    symbols = [relabel.get(s, s) for s in value.symbols]
    if name is None:
        return Value(value.kind, value.shape, tuple(symbols))
    if value.kind == "string":
        return Value(value.kind, value.shape, tuple(STRING_TRANSFORMS[name](symbols)))
    grid = GRID_TRANSFORMS[name](np.array(symbols, dtype=object).reshape(value.shape))
    return Value(value.kind, tuple(grid.shape), tuple(grid.reshape(-1).tolist()))
