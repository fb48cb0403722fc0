"""Per-layer rules of book-keeping (`bk`): from a layer's input a and output gradient g, the per-sample
squared norms of its weight gradient and what the clipped sum Σ_i c_i ∂ℓ_i/∂W needs.

Each rule returns (norms² (B,), per-sample gradients or None); the per-sample gradients, when a rule forms
them, are reused by the clipped sum (`bk.BookKeeper._accumulate`).
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn


def sq_rows(x: torch.Tensor) -> torch.Tensor:
    """Σ_j x_ij² of a (B, n) matrix as one batched product (one launch; pow + sum are two)."""
    return torch.bmm(x.unsqueeze(1), x.unsqueeze(2)).view(-1)


def gram(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The batched product x·y, (B, m, k)·(B, k, n) → (B, m, n), in FP32 whatever the inputs: bf16 and fp16 values
    are multiplied exactly in FP32 and summed in FP32, by cuBLAS with an FP32 output on CUDA (``out_dtype``), on
    FP32 copies elsewhere."""
    if x.dtype not in LOW and y.dtype not in LOW:
        return torch.bmm(x, y)
    if x.is_cuda and x.dtype == y.dtype:
        return torch.bmm(x, y, out_dtype=torch.float32)
    return torch.bmm(wide(x), wide(y))


LOW = (torch.bfloat16, torch.float16)


def wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in FP32 if it is bf16 or fp16, else as it is (FP32, FP64, integers)."""
    return t.float() if t.dtype in LOW else t


def unfold(layer: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, L, C·kh·kw) patches, L output positions.

    A 1×1 convolution without padding needs no copy (its patches are the strided pixels). Otherwise the
    batch is folded into the channels, (1, B·C, H, W): the same patches in one im2col launch, where
    PyTorch's CUDA im2col launches one kernel per example.
    """
    B, C = a.shape[:2]
    if layer.kernel_size == (1, 1) and layer.padding == (0, 0):
        return a[:, :, ::layer.stride[0], ::layer.stride[1]].flatten(2).transpose(1, 2)
    p = F.unfold(a.reshape(1, B * C, *a.shape[2:]), layer.kernel_size, layer.dilation, layer.padding, layer.stride)
    return p.reshape(B, C * layer.kernel_size[0] * layer.kernel_size[1], -1).transpose(1, 2)


def matrix_norm2(a: torch.Tensor, g: torch.Tensor):
    """Per-sample ‖g_iᵀ a_i‖_F² for a (B, T, din), g (B, T, dout), by the cheaper route.

    Returns:
        the (B,) squared norms, and the per-sample gradients (B, dout, din) when
        they were formed (the direct route), so the clipped sum reuses them.
    """
    T, din, dout = a.shape[1], a.shape[2], g.shape[2]
    if 2 * T * T < din * dout:  # memory traffic decides on CPU: B·2T² vs B·din·dout floats
        B = a.shape[0]  # ⟨a aᵀ, g gᵀ⟩ per sample
        aa, gg = gram(a, a.transpose(1, 2)), gram(g, g.transpose(1, 2))  # FP32 (B, T, T) each
        return torch.bmm(aa.view(B, 1, -1), gg.view(B, -1, 1)).view(-1), None
    ps = gram(g.transpose(1, 2), a)  # (B, dout, din), FP32
    return sq_rows(ps.flatten(1)), ps


GROUPED_MAX = 512  # out × in channels below which per-sample conv grads come from one grouped conv
DEPTHWISE = {"cpu": "shifted"}
"""How a depthwise layer's per-sample gradients are formed, per device type (absent: "grouped", one
convolution with the batch folded into the groups). Chosen by measurement (``bench/bench_dp_step.py
--depthwise``): on a 2-core CPU the k² shifted products are 3.4× faster over EfficientNet-Lite0's 16
depthwise layers at B = 16 (7.1 against 24.2 ms); on an H200 the grouped convolution is a little faster
(7.7 against 8.2 ms)."""


def depthwise_shifted(layer: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample gradients (B, k, kh·kw) of a depthwise convolution (one input channel a filter) as k²
    shifted products: ∂ℓ_b/∂W[o, 0, i, j] = Σ_{h,w} a_pad[b, c(o), h·s + i·d, w·s + j·d] · g[b, o, h, w].

    a: (B, C, H, W) with C·m = k (m filters per channel, ``groups`` = C); g: (B, k, H', W').
    """
    B, k, Ho, Wo = g.shape
    m = k // a.shape[1]
    ph, pw = layer.padding
    a = F.pad(a, (pw, pw, ph, ph))
    if m > 1:
        a = a.repeat_interleave(m, dim=1)  # channel o // m feeds filter o
    (kh, kw), (sh, sw), (dh, dw) = layer.kernel_size, layer.stride, layer.dilation
    taps = [(a[:, :, i * dh:i * dh + sh * (Ho - 1) + 1:sh, j * dw:j * dw + sw * (Wo - 1) + 1:sw] * g).sum((2, 3))
            for i in range(kh) for j in range(kw)]  # each (B, k)
    return torch.stack(taps, 2)


def conv_norm2(layer: nn.Conv2d, a: torch.Tensor, g: torch.Tensor, rows: torch.Tensor | None = None):
    """Per-sample squared norms (B,) of a conv's weight gradient, and per-sample grads when formed.

    g: (B, k, H', W') output grads, k = all the layer's filters or the selected ``rows`` (k,) of a
    `RowDelta`. Narrow layers and every grouped one (groups > 1: depthwise) get their per-sample grads
    (B, k, C/groups·kh·kw) from one convolution with the batch folded into the groups, which never forms
    the (B, L, C·kh·kw) patch matrix (measured: 2–4× faster there); wide ones use patches and `matrix_norm2`.
    """
    B, C = a.shape[:2]
    k, G = g.shape[1], layer.groups
    if G > 1 or k * C < GROUPED_MAX:  # these routes form their per-sample grads in (at least) FP32
        a, g = wide(a), wide(g)
    if G > 1 and rows is not None:  # each selected filter sees its own group's C/G input channels
        cg = C // G
        idx = (rows // (layer.out_channels // G) * cg).unsqueeze(1) + torch.arange(cg, device=a.device)
        a, G = a.index_select(1, idx.flatten()), k  # (B, k·C/G, H, W): now k groups of one filter each
        C = a.shape[1]
    if G > 1 and C == G and DEPTHWISE.get(a.device.type) == "shifted":
        ps = depthwise_shifted(layer, a, g)
        return sq_rows(ps.flatten(1)), ps
    if G > 1 or k * C < GROUPED_MAX:
        ps = torch.nn.grad.conv2d_weight(a.reshape(1, B * C, *a.shape[2:]), (B * k, C // G, *layer.kernel_size),
                                         g.reshape(1, B * k, *g.shape[2:]), layer.stride, layer.padding,
                                         layer.dilation, groups=B * G).reshape(B, k, -1)
        return sq_rows(ps.flatten(1)), ps
    if _pixel_gram_pays(layer, a, g):
        return pixel_ghost_norm2(layer, wide(a), wide(g)), None
    return matrix_norm2(unfold(layer, a), g.flatten(2).transpose(1, 2))


PIXEL_GRAM = {"cpu": 16.0}
"""Where a conv's ghost norm may take its patches' Gram from the pixels' Gram (`pixel_ghost_norm2`), per device
type, and the weight of one im2col float against one multiply-add in the choice (absent: always im2col).
Measured on a 2-core CPU (``bench/bench_dp_step.py``; ``docs/results/benchmarks.md``): on the built-in CNN at
B = 256 the two convolutions past the first no longer form im2col's patches. A GPU keeps im2col until it is
measured there."""


def _pixel_gram_pays(layer: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> bool:
    """Whether the pixel Grams (B·N²·C/(sh·sw) multiply-adds, N input pixels, and a copy of the input) cost less
    than im2col's patches (B·L·C·kh·kw floats) and their Gram (B·L²·C·kh·kw), floats weighted by `PIXEL_GRAM`."""
    weight = PIXEL_GRAM.get(a.device.type)
    if weight is None or layer.kernel_size == (1, 1):
        return False
    C, N, L = a.shape[1], a.shape[2] * a.shape[3], g.shape[2] * g.shape[3]
    ck = C * layer.kernel_size[0] * layer.kernel_size[1]
    if 2 * L * L >= ck * g.shape[1]:  # `matrix_norm2` forms per-sample gradients there, from the patches
        return False
    phases = layer.stride[0] * layer.stride[1]
    pairs = _pixel_map(layer, *a.shape[2:], *g.shape[2:], a).values().numel()
    return N * N * C // phases + 2 * pairs + (weight * N * C if phases > 1 else 0) < L * ck * (weight + L)


_MAPS: dict[tuple, torch.Tensor] = {}


def _pixel_map(layer: nn.Conv2d, H: int, W: int, Ho: int, Wo: int, like: torch.Tensor) -> torch.Tensor:
    """The 0/1 matrix (L·L, S·P²), sparse (CSR), that sums the flattened pixel Grams (`_pixel_grams`) into the
    flattened patch Gram: entry (l·L + l', u) is the number of kernel offsets at which output positions l and l'
    see the pixel pair u, both real (unpadded) pixels. A product with it beat gathering and scattering the same
    entries 2–3× on a CPU.

    Patch l holds a[c, r_l + i·dh, s_l + j·dw] at (c, i, j) (r_l, s_l its window's corner), so
    ⟨p_l, p_l'⟩ = Σ_{i,j} Σ_c a[c, r_l + i·dh, s_l + j·dw] · a[c, r_l' + i·dh, s_l' + j·dw]: the pixel Gram
    Σ_c a[c, u] a[c, v] at the two shifted pixels, summed over the offsets; padded pixels add 0. The corners
    step by the stride, so both pixels of a pair share their row mod sh and column mod sw: only the Grams
    within each of the sh·sw phases are needed.
    """
    key = (layer.kernel_size, layer.stride, layer.padding, layer.dilation, H, W, Ho, Wo, str(like.device),
           like.dtype)
    if key not in _MAPS:
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = layer.kernel_size, layer.stride, layer.padding, layer.dilation
        ho, wo, L = torch.arange(Ho), torch.arange(Wo), Ho * Wo
        Hp, Wp = -(-H // sh), -(-W // sw)  # a phase's rows and columns
        P = Hp * Wp
        src, dst = [], []
        for i in range(kh):
            for j in range(kw):
                r, c = ho * sh + i * dh - ph, wo * sw + j * dw - pw  # the pixel row / column each position sees
                ok = (((r >= 0) & (r < H))[:, None] & ((c >= 0) & (c < W))[None, :]).flatten()  # (L,)
                phase = ((r % sh)[:, None] * sw + (c % sw)[None, :]).flatten()[ok]
                pix, pos = ((r // sh)[:, None] * Wp + (c // sw)[None, :]).flatten()[ok], torch.arange(L)[ok]
                src.append((phase[:, None] * P * P + pix[:, None] * P + pix[None, :]).flatten())
                dst.append((pos[:, None] * L + pos[None, :]).flatten())
        src, dst = torch.cat(src), torch.cat(dst)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": the product used here is long stable
            warnings.simplefilter("ignore", UserWarning)
            _MAPS[key] = torch.sparse_coo_tensor(torch.stack([dst, src]), torch.ones(len(src), dtype=like.dtype),
                                                 (L * L, sh * sw * P * P)).coalesce().to_sparse_csr().to(like.device)
    return _MAPS[key]


def _pixel_grams(layer: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
    """(B, sh·sw·P²): for each phase of the input's pixels (row mod sh, column mod sw; P pixels each, the input
    zero-padded at the bottom and right to whole phases) the Gram Σ_c a[c, u] a[c, v] of its pixels."""
    (sh, sw), (B, C, H, W) = layer.stride, a.shape
    Hp, Wp = -(-H // sh), -(-W // sw)
    if (Hp * sh, Wp * sw) != (H, W):
        a = F.pad(a, (0, Wp * sw - W, 0, Hp * sh - H))
    A = a.reshape(B, C, Hp, sh, Wp, sw).permute(0, 3, 5, 2, 4, 1).reshape(B * sh * sw, Hp * Wp, C)  # (B·S, P, C)
    return torch.bmm(A, A.transpose(1, 2)).view(B, -1)


def pixel_ghost_norm2(layer: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample ‖∂ℓ_i/∂W‖² (B,) of a conv (groups 1) by the ghost norm ⟨P_i P_iᵀ, g_i g_iᵀ⟩, with the patch
    Gram P_i P_iᵀ (L, L) summed from the pixel Grams (`_pixel_map`): no (B, L, C·kh·kw) patches.

    a: (B, C, H, W) input; g: (B, k, H', W') output gradients.
    """
    gl = g.flatten(2)  # (B, k, L)
    patches = _pixel_map(layer, *a.shape[2:], *g.shape[2:], a) @ _pixel_grams(layer, a).T  # (L·L, B)
    grads = torch.bmm(gl.transpose(1, 2), gl).flatten(1)  # (B, L·L)
    return (patches.T * grads).sum(1)


def is_tf_same(layer: nn.Module) -> bool:
    """timm's `Conv2dSame` (TF 'SAME' padding: its forward pads the input by the input size, then convolves
    with padding 0), whose hooked input is the unpadded one."""
    return type(layer).__name__ == "Conv2dSame" and type(layer).__module__.startswith("timm.")


def tf_same_pad(layer: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
    """The input (B, C, H, W) padded as `Conv2dSame.forward` pads it (timm's `pad_same`)."""
    pads = []
    for i, k, s, d in zip(a.shape[-2:], layer.kernel_size, layer.stride, layer.dilation):
        p = max((math.ceil(i / s) - 1) * s + (k - 1) * d + 1 - i, 0)
        pads.append((p // 2, p - p // 2))
    return F.pad(a, (*pads[1], *pads[0]))


def embedding_norm2(layer: nn.Embedding, ids: torch.Tensor, g: torch.Tensor):
    """Per-sample squared norms (B,) of an embedding table's gradient, and the clipped sum's state.

    Sample i's gradient is Σ_t onehot(id_t) g_tᵀ, so its squared norm is Σ_{t,t'} [id_t = id_t'] ⟨g_t, g_t'⟩
    (the ghost norm with a one-hot a: B·T² floats) or, for small tables (V·D ≤ T²: token types), the norm of
    the per-sample tables (B, V·D) formed by one index_add. Tokens at ``padding_idx`` give no gradient.

    Args:
        ids: (B, *) indices; g: (B, *, D) output gradients.

    Returns:
        the (B,) squared norms and (ids (B, T), g (B, T, D) with padding tokens zeroed, per-sample tables
        (B, V·D) or None).
    """
    B, V, D = ids.shape[0], layer.num_embeddings, g.shape[-1]
    ids, g = ids.reshape(B, -1), g.reshape(B, -1, D)  # (B, T), (B, T, D)
    if layer.padding_idx is not None:
        g = g.masked_fill((ids == layer.padding_idx).unsqueeze(-1), 0)
    T = ids.shape[1]
    if V * D <= T * T:  # row b·V + id of a (B·V, D) table
        rows = (ids + V * torch.arange(B, device=ids.device).unsqueeze(1)).flatten()
        ps = g.new_zeros(B * V, D).index_add_(0, rows, g.reshape(-1, D)).view(B, -1)
        return sq_rows(ps), (ids, g, ps)
    gg = torch.bmm(g, g.transpose(1, 2)).masked_fill_(ids.unsqueeze(2) != ids.unsqueeze(1), 0)  # (B, T, T)
    return gg.flatten(1).sum(1), (ids, g, None)


def embedding_sum(layer: nn.Embedding, state, c: torch.Tensor) -> torch.Tensor:
    """Σ_i c_i ∂ℓ_i/∂E (V, D): one index_add of the scaled output gradients into the rows of their ids."""
    ids, g, ps = state
    if ps is not None:
        return (c @ ps).view(layer.weight.shape)
    gs = (g * c.view(-1, 1, 1)).reshape(-1, g.shape[-1])  # (B·T, D)
    return g.new_zeros(layer.weight.shape).index_add_(0, ids.flatten(), gs)


def normalized(layer, a: torch.Tensor) -> torch.Tensor:
    if isinstance(layer, nn.GroupNorm):
        return F.group_norm(a, layer.num_groups, eps=layer.eps)
    return F.layer_norm(a, layer.normalized_shape, eps=layer.eps)


def per_sample_affine(layer, a, g, y=None):
    """Per-sample grads of a norm layer's (weight, bias): each (B, C).

    The normalised input x̂ is read back from the output y = w·x̂ + b when every
    |w| is safely away from 0 (no second normalisation pass), else recomputed. The hooks keep y on a
    CPU only: on a GPU the check would be a host sync, and recomputing is one kernel like reading back.
    """
    w = layer.weight
    read = y is not None and bool((w.abs() > 1e-3).all())
    if isinstance(layer, nn.GroupNorm):  # channels on dim 1
        dims = tuple(range(2, a.dim()))
        gb = g.sum(dims)  # (B, C)
        if read:  # Σ g·(y − b)/w = (Σ g·y − b·Σ g)/w per channel: no full-size x̂
            return ((g * y.detach()).sum(dims) - layer.bias * gb) / w, gb
        return (g * normalized(layer, a)).sum(dims), gb
    dims = tuple(range(1, a.dim() - len(layer.normalized_shape)))  # () for (B, C) inputs: nothing to sum
    if read and dims:  # as above, per feature (B, *normalized_shape)
        gb = g.sum(dims)
        return (((g * y.detach()).sum(dims) - layer.bias * gb) / w).flatten(1), gb.flatten(1)
    xh = (y.detach() - layer.bias) / w if read else normalized(layer, a)
    gw, gb = ((g * xh).sum(dims), g.sum(dims)) if dims else (g * xh, g)
    return gw.flatten(1), gb.flatten(1)
