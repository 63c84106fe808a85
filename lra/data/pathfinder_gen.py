"""Pathfinder images, generated locally and seeded, written in the LRA release's layout.

The task: Linsley et al., *Learning long-range spatial dependencies with horizontal gated recurrent units*,
arXiv:1805.08315; LRA's Pathfinder and Path-X: Tay et al., *Long Range Arena: A Benchmark for Efficient
Transformers*, arXiv:2011.04006, Section 3.5 (docs/data.md). An independent implementation of the public
generator (github.com/drewlinsley/pathfinder, ``snakes2.py``; settings per resolution from LRA's
``lra_benchmarks/data/pathfinder.py``): two target paths of ``contour_length`` paddles grow alternately in random
directions, the first from at least ``seed_margin`` off every border (the original's ``2 * seed_distance``), the
second ``seed_distance`` from it. After a paddle along u ends at b, the path pivots at ``p = b + gap/2 * u`` and the
next, along u', starts at ``p + gap/2 * u'``; u' is drawn with the original's weights
``cos(min(|turn| * continuity, pi/2))^2`` among the turns that fit. Then ``num_distractors`` distractors of
``contour_length // 3`` paddles (one not fitting in 4 tries is left out: the original's ``allow_incomplete``);
markers at the start of a random target path and the end of the same (label 1) or of the other. Our choices:
  * Exact separation: a pixel is marked when a shape covers any of its ``antialias``^2 sub-samples; a path's
    consecutive paddles are at most ``link`` pixels apart (Chebyshev), different paths always farther, so the
    markers are joined by marked pixels in steps <= ``link`` iff the label is 1 (tests/test_pathfinder.py, a flood
    fill; the original does not promise it). The four path ends are kept free for the markers.
  * A path stays farther than ``self_link`` from its own paddles but the previous one (the original's rule, also a
    paddle late): touching itself would not change the label, this only keeps it from curling into a blob.
  * Turns on a grid of ``directions`` (10-degree steps, 5 at 128; the original's are about 19); paddle starts are
    kept exactly, rendered at the nearest quarter pixel.
  * Target pairs that do not fit are redrawn whole, as in the original, so kept paths have its distribution
    conditioned on fitting (about 2% of attempts fit at 32 x 32 with 14 paddles).
  * Intensity: 255 x the covered fraction of sub-samples (max on overlap), full contrast on 0; the original
    Lanczos-resizes and rescales each image to its own maximum.
  * Labels exactly balanced per batch (the original draws each); no single-paddle clutter (as its wrapper sets).
  * Ours in :data:`GEOMETRIES`: thickness 1 at 32 (the original's 0.5 at 2x is faint after resizing), ``gap``,
    ``link`` and ``self_link``, so the guarantee holds and gaps stay visible; hence fewer distractors fit than
    budgeted (docs/data.md). 16 x 16 (smoke, cpu presets) is our profile: continuous lines one pixel apart, thin
    gray paths, brighter markers; it fits 6 and 9 paddles, not 14.
  * A batch grows in lockstep (numpy over images x turns x stamp pixels), seeded ``[seed, resolution, setting,
    batch]``: the output does not depend on the worker count (lra/data/pathfinder_write.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from lra.errors import InputError

GENERATOR_VERSION = 1  # part of the generated data's folder name: bump when the images change

# setting -> contour length (paddles per target path); the release's three difficulties
SETTINGS: dict[str, int] = {"curv_baseline": 6, "curv_contour_length_9": 9, "curv_contour_length_14": 14}
IMAGES_PER_FILE = 1000  # images per imgs/<batch>/ folder and metadata/<batch>.npy file

# Occupancy bits. FIXED: border, finished paths. Per growing path (two slots): FAR, dilated by `link` (for other
# paths); NEAR, dilated by `self_link` (for its own later paddles), written a paddle late (never tests its predecessor).
_FIXED = 1
_FAR = (2, 8)
_NEAR = (4, 16)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Drawing parameters of one image size (pixels unless noted); see the module docstring."""

    side: int
    paddle_length: float
    thickness: float
    gap: float  # at most this far from one paddle's end to the next one's start
    link: int  # Chebyshev pixels joining consecutive paddles; different paths are farther apart
    self_link: int  # a path's paddles but the previous one stay farther than this from the new one
    marker_radius: float
    seed_distance: float  # between the starts of the two target paths
    seed_margin: float  # the first target path starts this far from every border
    continuity: float
    padding: int  # border rows/columns kept empty
    distractor_budget: int
    directions: int = 36  # paddle directions (36: 10-degree steps)
    antialias: int = 4  # sub-samples per pixel and axis
    subcells: int = 4  # paddle starts rendered at the nearest 1/subcells pixel

    def num_distractors(self, contour_length: int) -> int:
        return self.distractor_budget // max(contour_length // 3, 1)


GEOMETRIES: dict[int, Geometry] = {
    16: Geometry(
        side=16,
        paddle_length=1.5,
        thickness=0.6,
        gap=0.5,
        link=1,
        self_link=0,
        marker_radius=1.2,
        seed_distance=5.0,
        seed_margin=5.0,
        continuity=1.0,
        padding=1,
        distractor_budget=6,
    ),
    32: Geometry(
        side=32,
        paddle_length=2.0,
        thickness=1.0,
        gap=2.0,
        link=2,
        self_link=1,
        marker_radius=1.5,
        seed_distance=7.0,
        seed_margin=14.0,
        continuity=1.0,
        padding=1,
        distractor_budget=20,
    ),
    128: Geometry(
        side=128,
        paddle_length=5.0,
        thickness=1.5,
        gap=3.0,
        link=4,
        self_link=2,
        marker_radius=3.0,
        seed_distance=20.0,
        seed_margin=40.0,
        continuity=1.8,
        padding=1,
        distractor_budget=35,
        directions=72,
    ),
}


class GenerationError(RuntimeError):
    """The geometry leaves no room for the requested paths (too many failed attempts)."""


@dataclasses.dataclass(frozen=True)
class _Stamps:
    """Pixels of one shape at every (direction, sub-pixel offset) key, as offsets from the anchor pixel in a
    canvas row; rows padded by repeating entries (harmless for gathers, OR-scatters and max-draws)."""

    offsets: np.ndarray  # (keys, F) int32: marked pixels
    values: np.ndarray  # (keys, F) float32: covered fraction
    near: np.ndarray  # (keys, N) int32: marked pixels dilated by `self_link` (Chebyshev)
    far: np.ndarray  # (keys, D) int32: marked pixels dilated by `link` (Chebyshev)


@dataclasses.dataclass(frozen=True)
class _Tables:
    geo: Geometry
    margin: int  # canvas border around the image, wider than any stamp
    width: int  # canvas row length
    size: int  # canvas pixels
    paddle: _Stamps  # key = direction * subcells^2 + sub-pixel offset
    marker: _Stamps  # key = sub-pixel offset
    unit: np.ndarray  # (directions, 2): (dy, dx) of each direction
    turns: np.ndarray  # (K,) allowed turns in direction steps
    turn_weights: np.ndarray  # (K,) continuity weights
    border: np.ndarray  # (size,) uint8: _FIXED outside the drawable area


def _flat(mask_KxHxW: np.ndarray, half: int, width: int) -> np.ndarray:
    """Offsets (keys, max count) of the True pixels of windows centred on their anchor pixel."""
    keys = mask_KxHxW.shape[0]
    n = -(-int(mask_KxHxW.reshape(keys, -1).sum(1).max()) // 8) * 8  # a multiple of 8: tested as uint64 words
    out = np.zeros((keys, n), np.int32)
    for k in range(keys):
        ys, xs = np.nonzero(mask_KxHxW[k])
        out[k] = np.resize((ys - half) * width + (xs - half), n)  # repeats entries up to n
    return out


def _dilate(mask_KxHxW: np.ndarray, r: int) -> np.ndarray:
    """Chebyshev dilation by r; the window grows by r on every side."""
    keys, h, w = mask_KxHxW.shape
    grown = np.zeros((keys, h + 2 * r, w + 2 * r), bool)
    for dy in range(2 * r + 1):
        for dx in range(2 * r + 1):
            grown[:, dy : dy + h, dx : dx + w] |= mask_KxHxW
    return grown


def _pack(cover_KxHxW: np.ndarray, half: int, link: int, self_link: int, width: int) -> _Stamps:
    keys = cover_KxHxW.shape[0]
    marked = cover_KxHxW > 0
    offsets = _flat(marked, half, width)
    # each offset's window position (y, x) = divmod(offset + half * (width + 1), width)
    oy, ox = np.divmod(offsets + half * (width + 1), width)
    values = cover_KxHxW[np.arange(keys)[:, None], oy, ox].astype(np.float32)
    return _Stamps(
        offsets,
        values,
        _flat(_dilate(marked, self_link), half + self_link, width),
        _flat(_dilate(marked, link), half + link, width),
    )


def _coverage(
    points_Kx2: np.ndarray, directions_Kx2: np.ndarray, length: float, radius: float, half: int, antialias: int
) -> np.ndarray:
    """Covered fraction of each pixel of the (2 half + 1)^2 window around pixel (0, 0) by the
    capsule {x : dist(x, segment(p, p + length * u)) <= radius}, per key (points in [0, 1)^2)."""
    s = (np.arange(antialias) + 0.5) / antialias
    coords = (np.arange(-half, half + 1)[:, None] + s[None, :]).reshape(-1)  # sub-sample centres on one axis
    sy, sx = coords[None, :, None], coords[None, None, :]
    py, px = points_Kx2[:, 0, None, None], points_Kx2[:, 1, None, None]
    uy, ux = directions_Kx2[:, 0, None, None], directions_Kx2[:, 1, None, None]
    t = np.clip((sy - py) * uy + (sx - px) * ux, 0.0, length)
    inside = (sy - py - t * uy) ** 2 + (sx - px - t * ux) ** 2 <= radius * radius + 1e-9
    n = 2 * half + 1
    return inside.reshape(-1, n, antialias, n, antialias).mean(axis=(2, 4))


@functools.cache
def tables(side: int) -> _Tables:
    geo = GEOMETRIES[side]
    q, nd = geo.subcells, geo.directions
    angles = 2 * np.pi * np.arange(nd) / nd
    unit = np.stack([np.sin(angles), np.cos(angles)], 1)
    sub = (np.arange(q) + 0.5) / q
    offsets = np.stack(np.meshgrid(sub, sub, indexing="ij"), -1).reshape(-1, 2)  # (q^2, 2) (y, x)
    half_p = int(math.ceil(geo.paddle_length + geo.thickness / 2)) + 1
    half_m = int(math.ceil(geo.marker_radius)) + 1
    margin = max(half_p, half_m) + geo.link + 2
    width = geo.side + 2 * margin
    points = np.tile(offsets, (nd, 1))
    dirs = np.repeat(unit, q * q, 0)
    paddle = _pack(
        _coverage(points, dirs, geo.paddle_length, geo.thickness / 2, half_p, geo.antialias),
        half_p,
        geo.link,
        geo.self_link,
        width,
    )
    marker = _pack(
        _coverage(offsets, np.zeros_like(offsets), 0.0, geo.marker_radius, half_m, geo.antialias),
        half_m,
        geo.link,
        geo.self_link,
        width,
    )
    step = 360.0 / nd
    max_turn = int(math.ceil(90.0 / geo.continuity / step)) - 1  # weight > 0 only below 90/continuity degrees
    turns = np.arange(-max_turn, max_turn + 1, dtype=np.int32)
    weights = np.cos(np.minimum(np.abs(turns) * np.deg2rad(step) * geo.continuity, np.pi / 2)) ** 2
    border = np.full((width, width), _FIXED, np.uint8)
    lo, hi = margin + geo.padding, margin + geo.side - geo.padding
    border[lo:hi, lo:hi] = 0
    return _Tables(
        geo, margin, width, width * width, paddle, marker, unit, turns, weights.astype(np.float64), border.reshape(-1)
    )


@dataclasses.dataclass
class _Path:
    """One path per image row while it grows: where it is and what it drew (for rendering)."""

    pivot: np.ndarray  # (n, 2) float
    direction: np.ndarray  # (n,) int
    start: np.ndarray  # (n, 2): first paddle's start (the origin marker's centre)
    end: np.ndarray  # (n, 2): last paddle's end (the terminal marker's centre)
    paddles: list[tuple[np.ndarray, np.ndarray]]  # per paddle: (anchor (n,), key (n,))
    pending: np.ndarray  # (n, N) in-row indices of the newest paddle's NEAR pixels, not yet written

    def take(self, rows: np.ndarray) -> _Path:
        return _Path(
            self.pivot[rows],
            self.direction[rows],
            self.start[rows],
            self.end[rows],
            [(a[rows], k[rows]) for a, k in self.paddles],
            self.pending[rows],
        )


def _locate(t: _Tables, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(anchor index in the canvas row, sub-pixel key) of points (..., 2), clipped into the image."""
    q = t.geo.subcells
    p = np.clip(points, 0.0, t.geo.side - 1e-6)
    cell = p.astype(np.int32)  # floor: p >= 0
    frac = np.minimum(((p - cell) * q).astype(np.int32), q - 1)
    cell += t.margin
    return cell[..., 0] * t.width + cell[..., 1], frac[..., 0] * q + frac[..., 1]


def _inside(t: _Tables, points: np.ndarray) -> np.ndarray:
    y, x = points[..., 0], points[..., 1]
    return (y >= 0.0) & (y < t.geo.side) & (x >= 0.0) & (x < t.geo.side)


class _Canvas:
    """Occupancy bits of n images (rows of a uint8 array) and the lockstep paddle placement."""

    def __init__(self, t: _Tables, lab: np.ndarray, rng: np.random.Generator):
        self.t, self.rng = t, rng
        self.set_rows(lab)

    def set_rows(self, lab: np.ndarray) -> None:
        self.lab = lab
        self.n = lab.shape[0]
        self.flat = lab.reshape(-1)
        if self.flat.size >= 2**31:
            raise InputError("canvas too large for int32 indices: generate fewer images per round")
        self.base = np.arange(self.n, dtype=np.int32) * np.int32(self.t.size)

    def _hits(self, rows: np.ndarray, anchors: np.ndarray, stamp_idx: np.ndarray, forbid: int) -> np.ndarray:
        """Whether a stamp at anchors (m, C) of ``rows`` (m,) would mark a ``forbid`` pixel."""
        idx = (self.base[rows][:, None] + anchors)[..., None] + stamp_idx
        words = self.flat[idx].view(np.uint64)  # stamps are padded to multiples of 8 pixels
        hit = words[..., 0]
        for j in range(1, words.shape[-1]):
            hit = hit | words[..., j]
        return (hit & np.uint64(forbid * 0x0101010101010101)) != 0

    def _fits(
        self, rows: np.ndarray, a: np.ndarray, d: np.ndarray, forbid: int, marker_at: np.ndarray | None
    ) -> np.ndarray:
        """Whether paddles from ``a`` (m, C, 2) along ``d`` (m, C) fit the image, off ``forbid`` pixels."""
        t = self.t
        b = a + t.geo.paddle_length * t.unit[d]
        ok = _inside(t, a) & _inside(t, b)
        anchor, sub = _locate(t, a)
        ok &= ~self._hits(rows, anchor, t.paddle.offsets[d * t.geo.subcells**2 + sub], forbid)
        if marker_at is not None:
            m_anchor, m_sub = _locate(t, marker_at)
            ok &= ~self._hits(rows, m_anchor, t.marker.offsets[m_sub], forbid)
        return ok

    def _pixels(self, a: np.ndarray, d: np.ndarray, marker_at: np.ndarray | None, which: str) -> np.ndarray:
        """In-row indices (n, M) of a paddle's (and marker's) pixels dilated as ``which``: far or near."""
        t = self.t
        anchor, sub = _locate(t, a)
        idx = anchor[:, None] + getattr(t.paddle, which)[d * t.geo.subcells**2 + sub]
        if marker_at is not None:
            m_anchor, m_sub = _locate(t, marker_at)
            idx = np.concatenate([idx, m_anchor[:, None] + getattr(t.marker, which)[m_sub]], 1)
        return idx

    def _accept(self, path: _Path, slot: int, a: np.ndarray, d: np.ndarray, marker_at: np.ndarray | None) -> None:
        """Record the chosen paddles (one per row): FAR now, the previous paddle's NEAR now."""
        t = self.t
        base = self.base[:, None]
        self.flat[base + self._pixels(a, d, marker_at, "far")] |= np.uint8(_FAR[slot])
        if path.pending.size:
            self.flat[base + path.pending] |= np.uint8(_NEAR[slot])
        path.pending = self._pixels(a, d, marker_at, "near")
        anchor, sub = _locate(t, a)
        path.paddles.append((anchor, d * t.geo.subcells**2 + sub))
        b = a + t.geo.paddle_length * t.unit[d]
        path.end = b
        path.pivot = b + 0.5 * t.geo.gap * t.unit[d]
        path.direction = d

    def seed(self, slot: int, forbid: int, draw, trials: int, with_marker: bool) -> tuple[_Path, np.ndarray]:
        """First paddle of a new path per row, ``draw(rows)`` proposing (starts, directions) up to
        ``trials`` times; ok=False where none fits."""
        a = np.zeros((self.n, 2))
        d = np.zeros(self.n, np.int32)
        ok = np.zeros(self.n, bool)
        todo = np.arange(self.n)
        for _ in range(trials):
            starts, dirs = draw(todo)
            marker = starts[:, None] if with_marker else None
            fit = self._fits(todo, starts[:, None], dirs[:, None], forbid, marker)[:, 0]
            done = todo[fit]
            a[done], d[done], ok[done] = starts[fit], dirs[fit], True
            todo = todo[~fit]
            if not len(todo):
                break
        path = _Path(a, d, a.copy(), a.copy(), [], np.zeros((self.n, 0), np.int32))
        self._accept(path, slot, a, d, a if with_marker else None)
        return path, ok

    def extend(self, path: _Path, slot: int, forbid: int, end_marker: bool) -> np.ndarray:
        """Next paddle of ``path`` per row, its turn drawn by continuity among those that fit (else
        ok=False); ``end_marker``: its end must hold a marker."""
        t = self.t
        d = (path.direction[:, None] + t.turns[None, :]) % t.geo.directions  # (n, K)
        u = t.unit[d]
        a = path.pivot[:, None, :] + 0.5 * t.geo.gap * u
        b = a + t.geo.paddle_length * u
        valid = self._fits(np.arange(self.n), a, d, forbid, b if end_marker else None)
        w = valid * t.turn_weights[None, :]
        total = w.sum(1)
        ok = total > 0
        draw = self.rng.random(self.n) * total
        pick = np.minimum((np.cumsum(w, 1) < draw[:, None]).sum(1), len(t.turns) - 1)
        rows = np.arange(self.n)
        self._accept(path, slot, a[rows, pick], d[rows, pick], b[rows, pick] if end_marker else None)
        return ok


def _forbid(slot: int, others: Sequence[int]) -> int:
    """What a paddle of path ``slot`` may not touch: FIXED, other paths' FAR, its own NEAR."""
    bits = _FIXED | _NEAR[slot]
    for o in others:
        bits |= _FAR[o]
    return bits


def _finish(lab: np.ndarray, ok: np.ndarray) -> None:
    """Rows that succeeded keep their paths as FIXED (dilated by `link`); others drop them."""
    keep = _FIXED | _FAR[0] | _FAR[1]
    lab[ok] = np.where(lab[ok] & keep, _FIXED, 0).astype(np.uint8)
    lab[~ok] &= _FIXED


def _grow_targets(t: _Tables, n: int, length: int, rng: np.random.Generator, trials: int = 24):
    """Two interleaved target paths in n fresh images, failing rows dropped: (bits, paths, row indices)."""
    geo = t.geo
    nd = geo.directions
    canvas = _Canvas(t, np.tile(t.border, (n, 1)), rng)
    forbid = [_forbid(0, [1]), _forbid(1, [0])]
    lo, hi = geo.seed_margin, geo.side - geo.seed_margin
    path0, ok = canvas.seed(
        0,
        forbid[0],
        lambda rows: (rng.uniform(lo, hi, (len(rows), 2)), rng.integers(0, nd, len(rows), dtype=np.int32)),
        trials,
        True,
    )

    def near_path0(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        angle = rng.uniform(0, 2 * np.pi, len(rows))
        starts = path0.start[rows] + geo.seed_distance * np.stack([np.sin(angle), np.cos(angle)], -1)
        return starts, rng.integers(0, nd, len(rows), dtype=np.int32)

    path1, ok1 = canvas.seed(1, forbid[1], near_path0, trials, True)
    ok &= ok1
    alive = np.arange(n)
    for k in range(1, length):
        if not ok.all():  # drop failed rows: later steps only work on images that can still succeed
            keep = np.nonzero(ok)[0]
            alive, path0, path1 = alive[keep], path0.take(keep), path1.take(keep)
            canvas.set_rows(canvas.lab[keep])
            ok = ok[keep]
        last = k == length - 1
        ok &= canvas.extend(path0, 0, forbid[0], last)
        ok &= canvas.extend(path1, 1, forbid[1], last)
    keep = np.nonzero(ok)[0]
    lab = canvas.lab[keep]
    _finish(lab, np.ones(len(keep), bool))
    return lab, (path0.take(keep), path1.take(keep)), alive[keep]


def _grow_distractor(t: _Tables, lab: np.ndarray, length: int, rng: np.random.Generator, trials: int = 16):
    """One distractor path per row of ``lab`` (in place, FIXED where it succeeded); returns (path, ok)."""
    geo = t.geo
    canvas = _Canvas(t, lab, rng)
    forbid = _forbid(0, [])
    path, ok = canvas.seed(
        0,
        forbid,
        lambda rows: (
            rng.uniform(geo.padding, geo.side - geo.padding, (len(rows), 2)),
            rng.integers(0, geo.directions, len(rows), dtype=np.int32),
        ),
        trials,
        False,
    )
    for _ in range(1, length):
        ok &= canvas.extend(path, 0, forbid, False)
    _finish(lab, ok)
    return path, ok


def _stamp(t: _Tables, img: np.ndarray, rows: np.ndarray, anchor: np.ndarray, stamps: _Stamps, key: np.ndarray) -> None:
    """Max-draw one stamp per row (rows distinct) into the flat float canvas ``img``."""
    if not len(rows):
        return
    idx = rows[:, None] * t.size + anchor[:, None] + stamps.offsets[key]
    img[idx] = np.maximum(img[idx], stamps.values[key])


@dataclasses.dataclass(frozen=True)
class Batch:
    """Generated images with what the tests need to check them."""

    images: np.ndarray  # (n, side, side) uint8
    labels: np.ndarray  # (n,) int64: 1 = the markers are on one path
    markers: np.ndarray  # (n, 2, 2) float: centres (y, x) of the two drawn markers
    distractors: np.ndarray  # (n,) int: distractor paths drawn


def generate(
    side: int, contour_length: int, n: int, seed: Sequence[int] | int, max_attempts: int | None = None
) -> Batch:
    """n images of ``GEOMETRIES[side]``, target paths of ``contour_length`` paddles, deterministic in ``seed``,
    labels balanced (n // 2 ones). GenerationError after ``max_attempts`` tries (default 1,000 per image)."""
    t = tables(side)
    geo = t.geo
    rng = np.random.default_rng(seed)
    labs, paths, got, tried = [], [], 0, 0
    cap = max(1024, 8_000_000 // t.size)  # rows per round: ~8 MB of canvas keeps the temporaries in cache
    max_attempts = max_attempts or max(20_000, 1_000 * n)
    while got < n and tried < max_attempts:  # rounds of fresh attempts until n images have both target paths
        need = n - got
        rate = max(got / tried, 0.005) if tried else 0.25  # success rate so far
        m = min(int(need / rate * 1.2) + 16, cap)
        lab, (p0, p1), _ = _grow_targets(t, m, contour_length, rng)
        tried += m
        keep = np.arange(min(need, len(lab)))
        labs.append(lab[keep])
        paths.append((p0.take(keep), p1.take(keep)))
        got += len(lab)  # successes (all count for the rate; only `need` are kept)
    if got < n:
        raise GenerationError(
            f"pathfinder{side}: no room for two target paths of {contour_length} paddles "
            f"({got} of {n} images in {tried:,} attempts): use a shorter contour length"
        )
    lab = np.concatenate(labs)
    img = np.zeros(n * t.size, np.float32)
    rows_all = np.arange(n)
    starts = np.zeros((n, 2, 2))
    ends = np.zeros((n, 2, 2))
    offset = 0
    for p0, p1 in paths:
        rows = rows_all[offset : offset + len(p0.start)]
        for s, p in enumerate((p0, p1)):
            for anchor, key in p.paddles:
                _stamp(t, img, rows, anchor, t.paddle, key)
            starts[rows, s] = p.start
            ends[rows, s] = p.end
        offset += len(rows)
    # distractors, each tried up to 4 times per image
    d_len = max(contour_length // 3, 1)
    counts = np.zeros(n, np.int64)
    for _ in range(geo.num_distractors(contour_length)):
        todo = rows_all
        for _attempt in range(4):
            if not len(todo):
                break
            sub = lab[todo]
            path, ok = _grow_distractor(t, sub, d_len, rng)
            lab[todo] = sub
            done = todo[ok]
            for anchor, key in path.paddles:
                _stamp(t, img, done, anchor[ok], t.paddle, key[ok])
            counts[done] += 1
            todo = todo[~ok]
    # markers: the start of one target path and the end of the same (label 1) or the other (0)
    labels = rng.permutation(np.arange(n) < n // 2).astype(np.int64)
    origin = rng.integers(0, 2, n)
    terminal = np.where(labels == 1, origin, 1 - origin)
    markers = np.stack([starts[rows_all, origin], ends[rows_all, terminal]], 1)
    for j in range(2):
        anchor, sub = _locate(t, markers[:, j])
        _stamp(t, img, rows_all, anchor, t.marker, sub)
    canvas = img.reshape(n, t.width, t.width)[:, t.margin : t.margin + side, t.margin : t.margin + side]
    images = np.rint(np.clip(canvas, 0.0, 1.0) * 255.0).astype(np.uint8)
    return Batch(images, labels, markers, counts)


def batch_seed(seed: int, side: int, setting: str, batch: int) -> list[int]:
    return [seed, side, list(SETTINGS).index(setting), batch]
