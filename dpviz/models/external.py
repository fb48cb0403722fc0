"""torchvision ResNets and timm ViTs/DeiTs from local weights, made Opacus-ready.

Nothing is downloaded: every builder needs ``weights``, a local file holding a
state_dict (plain, or under a ``"state_dict"``/``"model"`` key) of the original
architecture. Classifier-head keys (``fc.*``, ``head.*``) are dropped, since
`Classifier` puts its own head on.

ResNets load into the original torchvision model first (so real weights with
BatchNorm running stats load cleanly), then `ModuleValidator.fix` swaps every
BatchNorm for a GroupNorm. The GroupNorms get fresh affine parameters (weight
1, bias 0): BatchNorm statistics have no GroupNorm equivalent, so only the
conv weights carry over.

timm ViTs are created at the resolution implied by the weights' ``pos_embed``
(tokens = (img / 16)^2 + 1; 224 for ImageNet weights) and inputs are resized
to it bilinearly inside the wrapper: small datasets (16-96 px) become 224 px,
which is slow on CPU. The CLS token and position embedding move into
`ClsPos`, which has a per-sample gradient rule.
"""

from __future__ import annotations

import math
import os
import warnings
from functools import partial

import timm
import torch
import torchvision
from torch import nn
from torch.nn import functional as F

from dpviz.errors import BackboneError, ConfigError, load_failure
from dpviz.runtime.imports import import_opacus

import_opacus()  # under the accountants' lock: never beside their placeholder import
from opacus.utils.module_utils import trainable_modules  # noqa: E402
from opacus.validators import ModuleValidator  # noqa: E402
from dpviz.models.vit import ClsPos, ClsTokenFeatures, register_with_opacus

register_with_opacus()  # this module uses Opacus anyway (its validators)

HEAD_PREFIXES = ("fc.", "head.")
SHOWN_KEYS = 3  # how many mismatched keys an error names
TIMM_ARCHS = {
    "vit_tiny": "vit_tiny_patch16_224",
    "vit_small": "vit_small_patch16_224",
    "deit_tiny": "deit_tiny_patch16_224",
    "deit_small": "deit_small_patch16_224",
}


def _to_rgb(x: torch.Tensor) -> torch.Tensor:
    """(B, 1 or 3, H, W) -> (B, 3, H, W)."""
    return x.repeat(1, 3, 1, 1) if x.shape[1] == 1 else x


def read_state_dict(path, name: str | None = None) -> dict[str, torch.Tensor]:
    """Read a backbone state_dict from a local file, without its head keys.

    ``name``: the architecture the file is for, named in the one-line error when the file is not one.

    Raises:
        ConfigError: the file is missing, unreadable, or holds no state_dict.
    """
    if path is None or not os.path.isfile(path):
        raise ConfigError("weights", "an existing local weights file (nothing is downloaded)", path)
    what = f"a {name} weights file" if name else "a weights file"
    try:
        with warnings.catch_warnings():  # torch warns on some garbage before failing: the error is the one line
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # corrupt, truncated, refused by weights_only, or no torch file at all (/etc/passwd)
        raise ConfigError("weights", f"{path} is not {what} (torch cannot read it as saved tensors)") from None
    if isinstance(obj, dict):
        obj = obj.get("state_dict", obj.get("model", obj))
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ConfigError("weights", f"{path} is not {what} (it holds no state_dict of tensors)")
    if obj and all(k.startswith("module.") for k in obj):  # saved from DataParallel
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return {k: v for k, v in obj.items() if not k.startswith(HEAD_PREFIXES)}


def _load(model: nn.Module, state: dict, name: str, path) -> None:
    """Load ``state`` into ``model`` (head excluded), naming a few mismatched keys."""
    own = {k for k in model.state_dict() if not k.startswith(HEAD_PREFIXES)}
    if not own & state.keys():  # tensors, but not one of this architecture's: say so, not 200 key names
        raise ConfigError("weights", f"{path} is not a {name} weights file (none of its {len(state)} tensors "
                                     f"is a {name} layer)")
    problems = []
    for label, keys in (("missing", own - state.keys()), ("unexpected", state.keys() - own)):
        if keys:
            more = f" (+{len(keys) - SHOWN_KEYS} more)" if len(keys) > SHOWN_KEYS else ""
            problems.append(f"{label} keys {', '.join(sorted(keys)[:SHOWN_KEYS])}{more}")
    if not problems:
        try:
            model.load_state_dict(state, strict=False)
        except RuntimeError as e:  # shape mismatch
            problems.append(next(s.strip() for s in str(e).splitlines() if "size mismatch" in s))
    if problems:
        raise BackboneError(f"weights {path} do not fit backbone {name!r}: {'; '.join(problems)}")


def check_opacus_compatible(model: nn.Module) -> None:
    """Raise unless Opacus can compute per-sample gradients for ``model``.

    Runs the validators behind `ModuleValidator.validate` (whose errors do not
    say which layer failed) module by module, on every module rather than only
    trainable ones (a frozen BatchNorm still mixes the batch), plus
    `GradSampleModule.validate`'s check for trainable layers with buffers.
    Trainable layers without a registered grad sampler pass: Opacus 1.6 falls
    back to functorch for them.

    Raises:
        BackboneError: one line naming the first offending layer and why.
    """
    trainable = {id(m) for _, m in trainable_modules(model)}  # modules owning trainable params
    for name, m in model.named_modules():
        validator = ModuleValidator.VALIDATORS.get(type(m))
        errors = [str(e).split(". ")[0] for e in (validator(m) if validator else [])]
        if not errors and id(m) in trainable and any(True for _ in m.buffers()):
            errors = ["a trainable layer with buffers (they would not be private)"]
        if errors:
            raise BackboneError(f"layer {name or '<root>'} ({type(m).__name__}) is not supported by Opacus: {errors[0]}")


def _check_args(name: str, channels: int, weights) -> None:
    if channels not in (1, 3):
        raise ConfigError("channels", f"1 or 3 for backbone {name!r}", channels)
    if weights is None:
        raise ConfigError("weights", f"a local weights file for backbone {name!r} (nothing is downloaded)", None)


def _residual_forward(self, x: torch.Tensor) -> torch.Tensor:
    """torchvision BasicBlock/Bottleneck forward with ``out + identity`` out of place."""
    pairs = [(self.conv1, self.bn1), (self.conv2, self.bn2)]
    pairs += [(self.conv3, self.bn3)] if hasattr(self, "conv3") else []
    out = x
    for i, (conv, norm) in enumerate(pairs):
        out = norm(conv(out))
        out = self.relu(out) if i < len(pairs) - 1 else out
    identity = x if self.downsample is None else self.downsample(x)
    return self.relu(out + identity)


class _BasicBlock(torchvision.models.resnet.BasicBlock):
    forward = _residual_forward


class _Bottleneck(torchvision.models.resnet.Bottleneck):
    forward = _residual_forward


_OUT_OF_PLACE = {torchvision.models.resnet.BasicBlock: _BasicBlock, torchvision.models.resnet.Bottleneck: _Bottleneck}


class ResNetBackbone(nn.Module):
    """torchvision ResNet with GroupNorm; blocks = layer1..layer4."""

    def __init__(self, net: torchvision.models.ResNet):
        super().__init__()
        self.stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
        self.blocks = nn.ModuleList([net.layer1, net.layer2, net.layer3, net.layer4])
        self.feature_dim = net.fc.in_features  # 512 (resnet18) or 2048 (resnet50)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_features(x)[-1]

    def layer_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        out, h = [x.flatten(1)], self.stem(_to_rgb(x))  # h: (B, 64, H/4, W/4)
        for b in self.blocks:
            h = b(h)
            out.append(h.mean(dim=(2, 3)))  # pooled channels, (B, C_l)
        return out


def build_resnet(name: str, *, channels: int, size: int, weights=None) -> ResNetBackbone:
    """Builder for "resnet18"/"resnet50"; ResNets take any input size."""
    _check_args(name, channels, weights)
    state = read_state_dict(weights, name)
    net = getattr(torchvision.models, name)(weights=None)
    _load(net, state, name, weights)
    net = ModuleValidator.fix(net)  # BatchNorm -> GroupNorm (fresh affine params)
    for m in net.modules():  # in-place ops on hooked outputs break Opacus' backward hooks
        if isinstance(m, nn.ReLU):
            m.inplace = False
        elif type(m) in _OUT_OF_PLACE:
            m.__class__ = _OUT_OF_PLACE[type(m)]
    model = ResNetBackbone(net)
    check_opacus_compatible(model)
    return model


class TimmViTBackbone(ClsTokenFeatures, nn.Module):
    """timm ViT/DeiT; blocks = its transformer blocks, features = CLS token."""

    def __init__(self, vit: nn.Module):
        super().__init__()
        if vit.num_prefix_tokens != 1 or getattr(vit, "no_embed_class", False):
            raise BackboneError(f"{type(vit).__name__}: only ViTs with one CLS token and class pos-embed are supported")
        self.img_size = vit.patch_embed.img_size[0]
        self.patch_embed = vit.patch_embed  # (B, 3, S, S) -> (B, T, D)
        self.clspos = ClsPos(vit.pos_embed.shape[1] - 1, vit.embed_dim)
        self.clspos.cls, self.clspos.pos = vit.cls_token, vit.pos_embed  # share loaded tensors
        self.blocks = vit.blocks
        self.norm = vit.norm
        self.feature_dim = vit.embed_dim

    def _tokens(self, x: torch.Tensor) -> torch.Tensor:
        x = _to_rgb(x)
        if x.shape[-2:] != (self.img_size, self.img_size):  # slow on CPU at 224
            x = F.interpolate(x, size=(self.img_size,) * 2, mode="bilinear", align_corners=False)
        return self.clspos(self.patch_embed(x))  # (B, T+1, D)


def vit_img_size(state: dict, patch: int = 16) -> int:
    """Resolution implied by ``pos_embed`` (1, (S / patch)^2 + 1, D); 224 if absent."""
    if "pos_embed" not in state:
        return 224
    grid = math.isqrt(state["pos_embed"].shape[1] - 1)
    if grid * grid + 1 != state["pos_embed"].shape[1]:
        raise BackboneError(f"pos_embed with {state['pos_embed'].shape[1]} tokens is not a square grid plus CLS")
    return grid * patch


def build_timm_vit(name: str, *, channels: int, size: int, weights=None) -> TimmViTBackbone:
    """Builder for the `TIMM_ARCHS` names; inputs are resized to the weights' resolution."""
    _check_args(name, channels, weights)
    state = read_state_dict(weights, name)
    vit = timm.create_model(TIMM_ARCHS[name], pretrained=False, num_classes=0, img_size=vit_img_size(state))
    _load(vit, state, name, weights)
    model = TimmViTBackbone(vit)
    check_opacus_compatible(model)
    return model


# the catalogue's builders (`dpviz.catalog`): one per architecture
build_resnet18, build_resnet50 = partial(build_resnet, "resnet18"), partial(build_resnet, "resnet50")
build_vit_tiny, build_vit_small = partial(build_timm_vit, "vit_tiny"), partial(build_timm_vit, "vit_small")
build_deit_tiny, build_deit_small = partial(build_timm_vit, "deit_tiny"), partial(build_timm_vit, "deit_small")
