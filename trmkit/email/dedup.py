"""Exact and near-duplicate e-mail, found before the split (prepare.py says why).

    exact: the same text after collapsing whitespace and case-folding (hashed with blake2b).
    near:  MinHash (128 hashes) over word 5-shingles, or character 5-shingles for texts of fewer
           than 10 words, with LSH banding to find candidates, then the true Jaccard similarity of
           the two shingle sets must reach `near_threshold`. A message is a near duplicate when it
           is that similar to an earlier *kept* message; the first of each group (input order) is
           kept. Group members with different labels are counted as `conflicts` (the first label
           wins), because a message labelled both ham and spam is noise the user should see.
           near_threshold >= 1 turns the near search off. The seed only picks the MinHash hash
           functions; with (bands, rows) from `lsh_shape` a pair at the threshold is a candidate
           with probability >= 0.995, and every candidate is verified exactly.
    Cost (measured): the 6,046 SpamAssassin messages (12.5 M characters) take about 2 s on one
    core; on 900 of them LSH found exactly the near duplicates an all-pairs Jaccard found.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

SHINGLE = 5  # words (or characters, for short texts) per shingle
NUM_PERM = 128  # MinHash hash functions
MAX_GROUP_EXAMPLES = 10  # duplicate groups kept in DedupResult.groups
_MAX_U64 = np.iinfo(np.uint64).max


@dataclass
class DedupResult:
    """Which messages to keep, and what was removed as a duplicate of what."""

    keep: list[int]  # indices of the kept messages, in input order
    exact: int  # removed because their normalised text equals an earlier message's
    near: int  # removed because their shingles are >= near_threshold similar to a kept message
    groups: list[list[int]]  # first few duplicate groups: [kept index, removed indices...]
    conflicts: int  # groups whose members carried different labels (the first label was kept)
    group_count: int = 0  # all duplicate groups (groups holds only the first few)
    duplicate_of: dict[int, int] = field(default_factory=dict)  # removed index -> kept index

    @property
    def removed(self) -> int:
        return self.exact + self.near


def normalize_for_dedup(text: str) -> str:
    """Whitespace collapsed and case-folded: re-wrapped or re-cased copies count as exact."""
    return " ".join(text.casefold().split())


def _exact_firsts(norms: Sequence[str]) -> list[int]:
    """For each text, the index of the first text with the same normalised form."""
    first: dict[bytes, int] = {}
    out = []
    for i, t in enumerate(norms):
        key = hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        out.append(first.setdefault(key, i))
    return out


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: turns small ids into well-spread 64-bit hashes (wrapping math)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


@dataclass
class Shingles:
    """Every text's sorted unique shingle hashes, concatenated: text i owns
    hashes[offsets[i]:offsets[i + 1]] (never empty)."""

    hashes: np.ndarray  # (total,) uint64
    offsets: np.ndarray  # (n + 1,) int64

    def of(self, i: int) -> np.ndarray:
        return self.hashes[self.offsets[i] : self.offsets[i + 1]]


def _windows(units: np.ndarray, lens: np.ndarray, k: int, salt: int) -> Shingles:
    """Hash every window of k consecutive units inside each text, for all texts at once.

    `units` holds the texts' units (word ids or code points) back to back, `lens` their counts
    (each >= k). Windows are hashed order-sensitively over the whole array and the ones that
    straddle two texts dropped. To sort and de-duplicate per text with one np.sort, the text
    number goes into the top bits of each key and the hash keeps the remaining (>= 40) bits.
    """
    h = _mix64(units)
    n_win = len(h) - k + 1
    acc = np.full(max(n_win, 0), salt, dtype=np.uint64)
    for j in range(k):
        acc = _mix64(acc ^ h[j : j + n_win])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    text = np.repeat(np.arange(len(lens), dtype=np.uint64), lens)[:n_win]
    valid = np.arange(n_win) - starts[text.astype(np.int64)] <= (lens - k)[text.astype(np.int64)]
    text_bits = np.uint64(max(1, int(len(lens)).bit_length()))
    keys = np.sort((text[valid] << (np.uint64(64) - text_bits)) | (acc[valid] >> text_bits))
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    keys = keys[first]  # sort + neighbours: np.unique is ~50x slower here (numpy 2.4)
    text = (keys >> (np.uint64(64) - text_bits)).astype(np.int64)
    offsets = np.searchsorted(text, np.arange(len(lens) + 1)).astype(np.int64)
    return Shingles(keys & (_MAX_U64 >> text_bits), offsets)


def _word_units(texts: Sequence[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Word ids (first-seen order, so deterministic) of all texts back to back, and counts."""
    flat = [w for words in texts for w in words]
    index = {w: i for i, w in enumerate(dict.fromkeys(flat))}  # C-speed unique, in order
    lens = np.array([len(w) for w in texts], dtype=np.int64)
    return np.fromiter(map(index.__getitem__, flat), np.uint64, len(flat)), lens


def _char_units(norms: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Code points of all texts back to back (texts shorter than k padded with zeros)."""
    padded = [t + "\0" * (k - len(t)) if len(t) < k else t for t in norms]
    lens = np.array([len(t) for t in padded], dtype=np.int64)
    joined = "".join(padded).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(joined, dtype=np.uint32).astype(np.uint64), lens


def shingle_sets(norms: Sequence[str], k: int = SHINGLE) -> Shingles:
    """Word k-shingles for texts of at least 2k words, character k-shingles for shorter ones
    (a one-line message has too few word shingles for a meaningful Jaccard)."""
    words = [t.split() for t in norms]
    by_words = np.array([len(w) >= 2 * k for w in words], dtype=bool)
    parts = {}
    for use_words, salt in ((True, 1), (False, 2)):
        idx = np.flatnonzero(by_words == use_words)
        if len(idx) == 0:
            continue
        if use_words:
            units, lens = _word_units([words[i] for i in idx])
        else:
            units, lens = _char_units([norms[i] for i in idx], k)
        parts[use_words] = (idx, _windows(units, lens, k, salt))
    counts = np.zeros(len(norms), dtype=np.int64)
    for idx, sh in parts.values():
        counts[idx] = np.diff(sh.offsets)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    hashes = np.empty(int(offsets[-1]), dtype=np.uint64)
    for idx, sh in parts.values():
        for j, i in enumerate(idx):
            hashes[offsets[i] : offsets[i + 1]] = sh.of(j)
    return Shingles(hashes, offsets)


def _minhash(sh: Shingles, rows: Sequence[int], seed: int, num_perm: int = NUM_PERM) -> np.ndarray:
    """(len(rows), num_perm) MinHash signatures of the given texts: min of a*h + b (mod 2^64),
    a odd. Texts are taken in groups of about 8k shingles and reduced with np.minimum.reduceat
    along the contiguous axis (10x faster than along the other); a text larger than a group is
    reduced block by block, so a multi-megabyte message never needs a big temporary."""
    rng = np.random.default_rng([seed, 1])
    a = rng.integers(0, _MAX_U64, size=(num_perm, 1), dtype=np.uint64, endpoint=True) | np.uint64(1)
    b = rng.integers(0, _MAX_U64, size=(num_perm, 1), dtype=np.uint64, endpoint=True)
    lens = np.array([sh.offsets[i + 1] - sh.offsets[i] for i in rows], dtype=np.int64)
    sig = np.empty((num_perm, len(rows)), dtype=np.uint64)
    block, p_block = 1 << 13, 16
    t0 = 0
    with np.errstate(over="ignore"):
        while t0 < len(rows):
            t1 = t0 + 1
            while t1 < len(rows) and lens[t0 : t1 + 1].sum() <= block:
                t1 += 1
            h = np.concatenate([sh.of(i) for i in rows[t0:t1]])
            starts = np.concatenate([[0], np.cumsum(lens[t0 : t1 - 1])]).astype(np.int64)
            for p0 in range(0, num_perm, p_block):
                ab = slice(p0, p0 + p_block)
                if t1 - t0 == 1:
                    sig[ab, t0] = _min_blocks(h, a[ab], b[ab], block)
                else:
                    vals = a[ab] * h[None, :] + b[ab]  # (p_block, shingles)
                    sig[ab, t0:t1] = np.minimum.reduceat(vals, starts, axis=1)
            t0 = t1
    return sig.T


def _min_blocks(h: np.ndarray, a: np.ndarray, b: np.ndarray, block: int) -> np.ndarray:
    """min over h of a*h + b for one large text, `block` shingles at a time: (len(a),)."""
    out = np.full(len(a), _MAX_U64, dtype=np.uint64)
    for r0 in range(0, len(h), block):
        np.minimum(out, (a * h[None, r0 : r0 + block] + b).min(axis=1), out=out)
    return out


def lsh_shape(threshold: float, num_perm: int = NUM_PERM, recall: float = 0.995) -> tuple[int, int]:
    """(bands, rows) with the most rows per band that still finds a pair at `threshold` with
    probability >= recall: more rows means fewer dissimilar candidates to verify."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        if num_perm % rows:
            continue
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= recall:
            best = (bands, rows)
    return best


def _band_keys(sig: np.ndarray, bands: int, rows: int) -> list[list[int]]:
    """One 64-bit key per (text, band): the band's rows folded with distinct odd multipliers."""
    mult = _mix64(np.arange(1, rows + 1, dtype=np.uint64)) | np.uint64(1)
    with np.errstate(over="ignore"):
        keys = (sig.reshape(len(sig), bands, rows) * mult).sum(axis=2, dtype=np.uint64)
    return keys.tolist()


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """Jaccard similarity of two sorted unique arrays."""
    inter = np.intersect1d(x, y, assume_unique=True).size
    return inter / (len(x) + len(y) - inter)


def _similar(x: np.ndarray, y: np.ndarray, threshold: float) -> bool:
    small, large = sorted((len(x), len(y)))
    return small >= threshold * large and jaccard(x, y) >= threshold  # size bound first: cheap


def _near_duplicates(sh: Shingles, order: Sequence[int], threshold: float, seed: int) -> dict[int, int]:
    """Greedy in input order: each text joins the first earlier kept text it matches (an LSH
    candidate whose true Jaccard reaches the threshold), else it is kept. {removed: kept}."""
    bands, rows = lsh_shape(threshold)
    keys = _band_keys(_minhash(sh, order, seed), bands, rows)
    buckets: list[dict[int, list[int]]] = [{} for _ in range(bands)]
    near: dict[int, int] = {}
    for pos, i in enumerate(order):
        candidates: set[int] = set()
        for band, key in enumerate(keys[pos]):
            candidates.update(buckets[band].get(key, ()))
        match = next((j for j in sorted(candidates) if _similar(sh.of(i), sh.of(j), threshold)), None)
        if match is not None:
            near[i] = match
            continue
        for band, key in enumerate(keys[pos]):
            buckets[band].setdefault(key, []).append(i)
    return near


def deduplicate(texts: list[str], labels: list[str | None] | None = None,
                near_threshold: float = 0.9, seed: int = 0) -> DedupResult:
    """Exact then near duplicates; keeps the first of each group. See the module docstring.

    near_threshold >= 1 turns the near-duplicate search off (exact duplicates only)."""
    if not near_threshold > 0.0:
        raise ValueError(f"near_threshold must be > 0 (>= 1 turns near duplicates off), got {near_threshold}")
    if labels is not None and len(labels) != len(texts):
        raise ValueError(f"labels has {len(labels)} entries but texts has {len(texts)}")
    norms = [normalize_for_dedup(t) for t in texts]
    firsts = _exact_firsts(norms)
    unique = [i for i, f in enumerate(firsts) if f == i]
    near: dict[int, int] = {}
    if near_threshold < 1.0 and len(unique) > 1:
        sh = shingle_sets([norms[i] for i in unique])
        found = _near_duplicates(sh, list(range(len(unique))), near_threshold, seed)
        near = {unique[i]: unique[j] for i, j in found.items()}
    duplicate_of = {i: near.get(f, f) for i, f in enumerate(firsts) if near.get(f, f) != i}
    return _dedup_result(len(texts), firsts, near, duplicate_of, labels)


def _dedup_result(n: int, firsts: list[int], near: dict[int, int], duplicate_of: dict[int, int],
                  labels: list[str | None] | None) -> DedupResult:
    groups: dict[int, list[int]] = {}
    for i, kept in sorted(duplicate_of.items()):
        groups.setdefault(kept, [kept]).append(i)
    ordered = [groups[k] for k in sorted(groups)]
    conflicts = 0
    if labels is not None:
        conflicts = sum(1 for g in ordered if len({labels[i] for i in g}) > 1)
    return DedupResult(
        keep=[i for i in range(n) if i not in duplicate_of],
        exact=sum(1 for i, f in enumerate(firsts) if f != i),
        near=len(near),
        groups=ordered[:MAX_GROUP_EXAMPLES],
        conflicts=conflicts,
        group_count=len(ordered),
        duplicate_of=duplicate_of,
    )
