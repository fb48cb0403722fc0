"""Public pretraining data made from random processes (no private data, no download).

Following "learning to see by looking at noise" / "learning priors from random
processes", each image is a random drawing of 1–3 anti-aliased strokes; the
label says which kind of process drew it (a line family at one of four
orientations, a ring, an arc, a cross, a box, a blob, …). A backbone trained to
tell them apart learns stroke and edge detectors that transfer to handwritten
digits only partly, so linear probing alone is clearly worse than full
fine-tuning on the private task (measured in the README).

The images are generated, so they cannot coincide with any private record;
`tests/test_data.py` also checks their nearest private neighbours.
"""

from __future__ import annotations

import math

import torch

NUM_CLASSES = 12


def _segment(xx, yy, p0, p1, width):
    """Intensity of a segment p0→p1 over the pixel grid; p0, p1: (N, 2)."""
    d = p1 - p0
    t = ((xx[None] - p0[:, 0, None, None]) * d[:, 0, None, None]
         + (yy[None] - p0[:, 1, None, None]) * d[:, 1, None, None]) / (d.pow(2).sum(1)[:, None, None] + 1e-6)
    t = t.clamp(0, 1)
    px = p0[:, 0, None, None] + t * d[:, 0, None, None]
    py = p0[:, 1, None, None] + t * d[:, 1, None, None]
    dist2 = (xx[None] - px) ** 2 + (yy[None] - py) ** 2
    return torch.exp(-dist2 / width[:, None, None] ** 2)


def _polyline(xx, yy, pts, width, closed=False):
    """Union (max) of consecutive segments through pts (N, P, 2)."""
    P = pts.shape[1]
    out = torch.zeros(pts.shape[0], *xx.shape)
    for i in range(P if closed else P - 1):
        out = torch.maximum(out, _segment(xx, yy, pts[:, i], pts[:, (i + 1) % P], width))
    return out


def _ring(c, r, a0, a1, n=12):
    """Points (N, n, 2) on arcs of centre c (N, 2), radius r (N,), angles a0→a1 (N,)."""
    a = a0[:, None] + (a1 - a0)[:, None] * torch.linspace(0, 1, n)[None]
    return torch.stack([c[:, 0, None] + r[:, None] * a.cos(), c[:, 1, None] + r[:, None] * a.sin()], -1)


def _draw_class(k: int, n: int, g: torch.Generator, xx, yy) -> torch.Tensor:
    U = lambda *s, lo=0.0, hi=1.0: lo + (hi - lo) * torch.rand(*s, generator=g)  # noqa: E731
    w = U(n, lo=0.05, hi=0.09)
    c = U(n, 2, lo=0.3, hi=0.7)
    if k < 4:  # 1-3 parallel strokes at orientation k·45° (± jitter)
        ang = k * math.pi / 4 + U(n, lo=-0.2, hi=0.2)
        dvec = torch.stack([ang.cos(), ang.sin()], -1) * U(n, 1, lo=0.25, hi=0.4)
        img = torch.zeros(n, *xx.shape)
        normal = torch.stack([-ang.sin(), ang.cos()], -1)
        for j in range(3):
            keep = (U(n) < [1.0, 0.6, 0.3][j]).float()[:, None, None]
            cj = c + normal * (j - 1) * 0.22
            img = torch.maximum(img, keep * _segment(xx, yy, cj - dvec, cj + dvec, w))
        return img
    if k in (4, 5):  # small / large rings
        r = U(n, lo=0.12, hi=0.2) if k == 4 else U(n, lo=0.25, hi=0.35)
        return _polyline(xx, yy, _ring(c, r, torch.zeros(n), torch.full((n,), 2 * math.pi)), w, closed=True)
    if k in (6, 7):  # open arcs facing left / right
        r, a0 = U(n, lo=0.18, hi=0.32), U(n, lo=-0.3, hi=0.3) + (0 if k == 6 else math.pi) - math.pi / 2
        return _polyline(xx, yy, _ring(c, r, a0, a0 + math.pi), w)
    if k == 8:  # cross of two perpendicular strokes
        ang, L = U(n, hi=math.pi), U(n, 1, lo=0.2, hi=0.35)
        d1 = torch.stack([ang.cos(), ang.sin()], -1) * L
        d2 = torch.stack([-ang.sin(), ang.cos()], -1) * L
        return torch.maximum(_segment(xx, yy, c - d1, c + d1, w), _segment(xx, yy, c - d2, c + d2, w))
    if k in (9, 10):  # box / triangle outlines
        m = 4 if k == 9 else 3
        r, a0 = U(n, lo=0.2, hi=0.33), U(n, hi=2 * math.pi)
        return _polyline(xx, yy, _ring(c, r, a0, a0 + 2 * math.pi * (m - 1) / m, n=m), w, closed=True)
    # k == 11: a filled blob
    r = U(n, lo=0.08, hi=0.2)
    return torch.exp(-((xx[None] - c[:, 0, None, None]) ** 2 + (yy[None] - c[:, 1, None, None]) ** 2) / r[:, None, None] ** 2)


def random_process_images(n: int, *, channels: int = 1, size: int = 16, seed: int = 0):
    """Generate n labelled images.

    Returns:
        x: (n, channels, size, size) float32 in [-1, 1]; y: (n,) int64 in [0, NUM_CLASSES).
    """
    g = torch.Generator().manual_seed(seed)
    lin = (torch.arange(size) + 0.5) / size
    yy, xx = torch.meshgrid(lin, lin, indexing="ij")
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = torch.zeros(n, size, size)
    for k in range(NUM_CLASSES):
        idx = (y == k).nonzero().squeeze(1)
        if len(idx):
            x[idx] = _draw_class(k, len(idx), g, xx, yy)
    x = (x * (0.7 + 0.3 * torch.rand(n, 1, 1, generator=g))).clamp(0, 1)
    x = x + 0.05 * torch.randn(x.shape, generator=g)
    if channels > 1:  # a random tint per image so colour backbones see colour
        tint = 0.5 + 0.5 * torch.rand(n, channels, 1, 1, generator=g)
        x = x[:, None] * tint
    else:
        x = x[:, None]
    return (x.clamp(0, 1) * 2 - 1).float(), y
