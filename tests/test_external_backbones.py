"""torchvision/timm backbones built from local weights files (no downloads)."""

from __future__ import annotations

import random

import pytest
import timm
import torch
import torchvision
from opacus import GradSampleModule
from torch import nn

from dpviz.errors import BackboneError, ConfigError
from dpviz import catalog
from dpviz.models import Classifier, build_backbone
from dpviz.models.external import check_opacus_compatible

B = 2
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory):
    net = torchvision.models.resnet18(weights=None)  # with BatchNorm and fc
    path = tmp_path_factory.mktemp("w") / "resnet18.pt"
    torch.save(net.state_dict(), path)
    return path, net.state_dict()


@pytest.fixture(scope="module")
def vit_tiny_file(tmp_path_factory):
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=5)
    path = tmp_path_factory.mktemp("w") / "vit_tiny.pt"
    torch.save({"model": vit.state_dict()}, path)  # wrapped state_dict, with head.*
    return path, vit.state_dict()


def _check_dp_step(backbone: nn.Module, x: torch.Tensor) -> None:
    """Forward+backward through Opacus: every trainable parameter gets (B, ...) grad_sample."""
    gsm = GradSampleModule(Classifier(backbone, 10))
    nn.functional.cross_entropy(gsm(x), torch.arange(len(x)) % 10).backward()
    for name, p in gsm.named_parameters():
        if p.requires_grad:
            assert p.grad_sample is not None, name
            assert p.grad_sample.shape == (len(x), *p.shape), name
            assert torch.allclose(p.grad_sample.mean(0), p.grad, rtol=1e-3, atol=1e-6), name


def _check_layer_features(backbone: nn.Module, x: torch.Tensor) -> None:
    feats = backbone.layer_features(x)
    assert len(feats) == len(backbone.blocks) + 1
    assert torch.equal(feats[0], x.flatten(1))
    assert feats[-1].shape == (len(x), backbone.feature_dim)
    assert torch.allclose(feats[-1], backbone.forward_features(x), atol=1e-5)


def test_resnet18_loads_weights_and_trains_with_opacus(resnet18_file):
    path, saved = resnet18_file
    bb = build_backbone("resnet18", channels=1, size=32, weights=str(path))
    assert torch.equal(bb.stem[0].weight, saved["conv1.weight"])
    assert torch.equal(bb.blocks[3][1].conv2.weight, saved["layer4.1.conv2.weight"])
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in bb.modules())
    assert isinstance(bb.stem[1], nn.GroupNorm)
    assert bb.feature_dim == 512 and len(bb.blocks) == 4
    x = torch.rand(B, 1, 32, 32) * 2 - 1  # 1 channel, repeated to 3 inside
    assert bb.forward_features(x).shape == (B, 512)
    _check_layer_features(bb, x)
    assert [f.shape[1] for f in bb.layer_features(x)[1:]] == [64, 128, 256, 512]
    _check_dp_step(bb, x)


def test_vit_tiny_loads_weights_at_their_resolution(vit_tiny_file):
    path, saved = vit_tiny_file
    bb = build_backbone("vit_tiny", channels=3, size=16, weights=str(path))
    assert bb.img_size == 32  # from pos_embed: (32 / 16)^2 + 1 = 5 tokens
    assert torch.equal(bb.blocks[0].attn.qkv.weight, saved["blocks.0.attn.qkv.weight"])
    assert torch.equal(bb.clspos.pos, saved["pos_embed"])
    assert bb.feature_dim == 192 and len(bb.blocks) == 12
    x = torch.rand(B, 3, 16, 16) * 2 - 1  # resized to 32×32 inside
    assert bb.forward_features(x).shape == (B, 192)
    _check_layer_features(bb, x)
    _check_dp_step(bb, x)


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "vit_tiny", "vit_small", "deit_tiny", "deit_small"])
def test_builders_registered(name):
    assert catalog.backbone(name).needs_weights
    with pytest.raises(ConfigError, match="weights"):  # nothing is downloaded
        build_backbone(name, channels=3, size=32, weights=None)


def test_resnet50_builds_from_weights(tmp_path):
    path = tmp_path / "r50.pt"
    torch.save({"state_dict": torchvision.models.resnet50(weights=None).state_dict()}, path)
    bb = build_backbone("resnet50", channels=3, size=16, weights=str(path))
    assert bb.feature_dim == 2048
    assert bb.forward_features(torch.zeros(1, 3, 16, 16)).shape == (1, 2048)


def test_bad_channels(resnet18_file):
    with pytest.raises(ConfigError, match="channels"):
        build_backbone("resnet18", channels=2, size=32, weights=str(resnet18_file[0]))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="weights.*existing local weights file") as e:
        build_backbone("resnet18", channels=3, size=32, weights=str(tmp_path / "nope.pt"))
    assert "nope.pt" in str(e.value)


class _NotATensor:
    pass


@pytest.mark.parametrize("kind", ["random", "truncated", "pickle", "not_tensors"])
def test_unreadable_file(tmp_path, resnet18_file, kind):
    path = tmp_path / f"{kind}.pt"
    if kind == "random":
        path.write_bytes(random.Random(0).randbytes(256))
    elif kind == "truncated":
        path.write_bytes(resnet18_file[0].read_bytes()[:4096])
    elif kind == "pickle":  # weights_only refuses arbitrary classes
        torch.save({"x": _NotATensor()}, path)
    else:
        torch.save({"lr": 0.1}, path)
    with pytest.raises(ConfigError, match="weights") as e:
        build_backbone("resnet18", channels=3, size=32, weights=str(path))
    msg = str(e.value)
    assert "\n" not in msg and path.name in msg


@pytest.mark.parametrize("name", ["resnet18", "vit_tiny"])
def test_a_file_that_is_not_weights_is_one_plain_line(name, tmp_path):
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ConfigError) as e:
        build_backbone(name, channels=3, size=32, weights=str(text))
    assert str(e.value) == f"weights: {text} is not a {name} weights file (torch cannot read it as saved tensors)"


def test_weights_of_another_architecture_are_named_as_such(tmp_path, resnet18_file):
    with pytest.raises(ConfigError, match=r"is not a vit_tiny weights file \(none of its \d+ tensors"):
        build_backbone("vit_tiny", channels=3, size=32, weights=str(resnet18_file[0]))


def test_mismatched_keys_are_named(tmp_path, resnet18_file):
    state = dict(resnet18_file[1])
    del state["layer1.0.conv1.weight"]
    state["extra.weight"] = torch.zeros(1)
    path = tmp_path / "bad.pt"
    torch.save(state, path)
    with pytest.raises(BackboneError, match="missing keys layer1.0.conv1.weight.*unexpected keys extra.weight"):
        build_backbone("resnet18", channels=3, size=32, weights=str(path))


@pytest.mark.parametrize("frozen", [False, True])
def test_unfixed_batchnorm_is_rejected(frozen):
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))
    model[1].requires_grad_(not frozen)  # frozen, it still mixes the batch in training
    with pytest.raises(BackboneError, match=r"layer 1 \(BatchNorm1d\).*BatchNorm cannot support"):
        check_opacus_compatible(model)


class _Scaled(nn.Module):
    """A trainable layer with a running buffer and no grad sampler."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        return x * self.scale + self.running


def test_trainable_layer_with_buffers_is_rejected():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(_Scaled()))
    with pytest.raises(BackboneError, match=r"layer 1\.0 \(_Scaled\).*buffers"):
        check_opacus_compatible(model)


class _Gain(nn.Module):
    """A trainable layer Opacus has no grad sampler for."""

    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.gain


def test_layer_without_grad_sampler_passes_via_functorch():
    """Opacus 1.6 reports nothing for it: functorch computes its per-sample gradients."""
    model = nn.Sequential(nn.Linear(4, 4), _Gain())
    check_opacus_compatible(model)
    gsm = GradSampleModule(model)
    gsm(torch.randn(3, 4)).sum().backward()
    assert model[1].gain.grad_sample.shape == (3, 4)
