"""Per-sample gradients of depthwise convolutions, by each exact method, on one device: what
`dpviz.privacy.bk_rules.DEPTHWISE` chooses from.

EfficientNet-Lite0 (random weights, every layer trainable) at the real-vision shape (1 × 28 × 28 images,
resized to 48 px inside the backbone's stem as the task does). One forward and backward captures each of its 16 depthwise
layers' input a and output gradient g; then, timed in alternation:

- ``grouped``: one convolution with the batch folded into the groups (B·C groups);
- ``shifted``: k² shifted products, (a_pad[..., i::s, j::s] · g) summed over the output pixels;

summed over the 16 layers; and the whole DP step (book-keeping) with each rule against a plain step.
Usage: python bench/bench_depthwise.py [--device cpu|cuda] [--batch 16] [--step-batch 64]
"""

from __future__ import annotations

import argparse
import copy

import torch
from torch import nn

import dp_step_cuda as gpu  # also puts the repository on sys.path (through common)
from common import interleaved
from results import record
from dpviz.privacy import bk_rules


def lite0(device: str) -> nn.Module:
    from dpviz.models import Classifier
    from dpviz.models.efficientnet import build_efficientnet_lite0
    from dpviz.training import prepare

    torch.manual_seed(0)
    model = Classifier(build_efficientnet_lite0(channels=1, size=28), 10)
    prepare.set_trainable(model, "all")
    return model.to(device).train()


def captured(model: nn.Module, x, y) -> list[tuple]:
    """(layer, a, g) of every depthwise convolution of one forward and backward."""
    keep, handles = {}, []
    for m in model.modules():
        if isinstance(m, nn.Conv2d) and m.groups == m.in_channels > 1:
            def hook(mod, args, out):
                out.retain_grad()
                keep[mod] = (args[0].detach(), out)
            handles.append(m.register_forward_hook(hook))
    torch.nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
    for h in handles:
        h.remove()
    return [(m, a, out.grad.detach()) for m, (a, out) in keep.items()]


def grouped(layer, a, g):
    B, C = a.shape[:2]
    return torch.nn.grad.conv2d_weight(a.reshape(1, B * C, *a.shape[2:]), (B * g.shape[1], 1, *layer.kernel_size),
                                       g.reshape(1, -1, *g.shape[2:]), layer.stride, layer.padding, layer.dilation,
                                       groups=B * C).reshape(B, g.shape[1], -1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch", type=int, default=16, help="batch of the per-layer comparison")
    ap.add_argument("--step-batch", type=int, default=64, help="batch of the whole-step comparison")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    dev = args.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    model = lite0(dev)
    x, y = torch.randn(args.batch, 1, 28, 28, device=dev), torch.randint(0, 10, (args.batch,), device=dev)
    layers = captured(model, x, y)
    for m, a, g in layers:  # the two methods agree before either is timed
        assert torch.allclose(grouped(m, a, g), bk_rules.depthwise_shifted(m, a, g), rtol=1e-3, atol=1e-5)
    rules = {"grouped": grouped, "shifted": bk_rules.depthwise_shifted}
    t = interleaved({k: (lambda f=f: [f(m, a, g) for m, a, g in layers]) for k, f in rules.items()},
                    rounds=args.rounds, sync=sync)
    print(f"{len(layers)} depthwise layers, B = {args.batch}: " +
          ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items()), flush=True)
    xs, ys = (torch.randn(args.step_batch, 1, 28, 28, device=dev),
              torch.randint(0, 10, (args.step_batch,), device=dev))
    chosen = dict(bk_rules.DEPTHWISE)

    def with_rule(rule, step):
        def run():
            bk_rules.DEPTHWISE[dev] = rule
            step()
        return run

    steps = {"plain": gpu.make_step("plain", model, xs, ys)}
    for rule in rules:
        steps[f"dpviz ({rule})"] = with_rule(rule, gpu.make_step("dpviz", copy.deepcopy(model), xs, ys))
    st = interleaved(steps, rounds=args.rounds, reps=2, sync=sync)
    bk_rules.DEPTHWISE.clear()
    bk_rules.DEPTHWISE.update(chosen)
    plain = st["plain"]
    print(f"DP step B = {args.step_batch}: plain {plain * 1e3:.1f} ms; " +
          ", ".join(f"{k} {v / plain:.2f}×" for k, v in st.items() if k != "plain"))
    where = torch.cuda.get_device_name() if dev == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    record(f"depthwise_{dev}", title=f"Per-sample depthwise gradients on EfficientNet-Lite0 ({where})",
           columns=["method", f"16 depthwise layers, B = {args.batch}", f"DP step ÷ plain, B = {args.step_batch}"],
           rows=[[k, f"{t[k] * 1e3:.1f} ms", f"{st[f'dpviz ({k})'] / plain:.2f}×"] for k in rules],
           notes=f"{where}, torch {torch.__version__}; medians of {args.rounds} alternating rounds; the plain step "
                 f"{plain * 1e3:.1f} ms. dpviz uses: {bk_rules.DEPTHWISE.get(dev, 'grouped')}.")


if __name__ == "__main__":
    main()
