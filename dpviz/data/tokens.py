"""Texts to token ids with a backbone's tokenizer, once per (texts, tokenizer, max length).

A text dataset's texts (every split) are tokenised in one batch by the ``tokenizers`` library reading
the folder's ``tokenizer.json`` (no ``transformers`` import); a folder with only ``vocab.txt`` (and its
configs) goes through ``transformers.AutoTokenizer``, imported then. Each text becomes exactly
``max_length`` ids: truncated (special tokens kept), then padded on the right with the tokenizer's pad id.

The ids are cached under ``<cache>/tokens/<key>.npz`` (``<cache>``: ``$DPVIZ_CACHE_DIR`` or
``./cache``), the key hashing the texts, the tokenizer's files' bytes and the max length, so a changed
text, vocabulary or length is another file. A cache file that cannot be read is removed and remade.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from dpviz import catalog
from dpviz.errors import ConfigError, StoreError
from dpviz.store.artifacts import read_bytes
from dpviz.store.safefile import real_folder, write_atomic
from dpviz.store.home import default_cache_dir

DEFAULT_BACKBONE, DEFAULT_MAX_LENGTH = "minilm", 64  # a loader called without a run's config
# The files that decide how a folder tokenises (never the weights: hashing them would be slow).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model",
                   "sentencepiece.bpe.model", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json")
PREFIX_CHARS_PER_TOKEN = 8  # see `_encode_fast`
_FORMAT = b"dpviz-tokens-2"  # bump when the cached layout or the tokenising rules change
_DAMAGED = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def tokenizer_setup(cfg) -> tuple[Path, int]:
    """(tokenizer folder, max length) for ``cfg``: its backbone's tokenizer, or MiniLM's and 64 for None."""
    if cfg is None:
        return Path(catalog.backbone(DEFAULT_BACKBONE).tokenizer_dir(None)), DEFAULT_MAX_LENGTH
    return Path(catalog.backbone(cfg.backbone).tokenizer_dir(cfg)), int(cfg.max_length)


def _read_json(path: Path) -> dict:
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def _pad_token(folder: Path) -> str | None:
    """The pad token's text as the folder's configs name it (a string or ``{"content": ...}``)."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        tok = _read_json(folder / name).get("pad_token")
        tok = tok.get("content") if isinstance(tok, dict) else tok
        if isinstance(tok, str):
            return tok
    return (_read_json(folder / "tokenizer.json").get("padding") or {}).get("pad_token")


def pad_id(folder: str | Path, tokenizer=None) -> int:
    """The pad id of the tokenizer in ``folder`` (0, BERT's, where the folder names no pad token)."""
    folder = Path(folder)
    if tokenizer is None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for tok in (_pad_token(folder), "[PAD]", "<pad>"):
        i = tokenizer.token_to_id(tok) if tok else None
        if i is not None:
            return int(i)
    return 0


def _encode_fast(texts: list[str], folder: Path, max_length: int) -> tuple[np.ndarray, int]:
    """Token ids (N, max_length) and the pad id, with ``tokenizers`` from ``folder/tokenizer.json``."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as e:  # the Rust library raises a bare Exception for a malformed file
        raise ConfigError("backbone", f"a readable tokenizer: cannot read {folder / 'tokenizer.json'} "
                                      f"({' '.join(str(e).split())[:160]})") from None
    pid = pad_id(folder, tok)
    tok.enable_truncation(max_length=max_length)
    tok.enable_padding(length=max_length, pad_id=pid, pad_token=tok.id_to_token(pid) or "[PAD]")
    # A long text is cut at a space well past where max_length tokens end (a token spans at least one
    # character, usually four), so a long article is not tokenised whole; a cut text whose ids do not
    # reach the end (no padding left) is tokenised again whole, so the ids are those of the full text.
    cut = [_head(t, PREFIX_CHARS_PER_TOKEN * max_length) for t in texts]
    ids = np.array([e.ids for e in tok.encode_batch(cut)], dtype=np.int64).reshape(len(texts), max_length)
    short = [i for i, (c, t) in enumerate(zip(cut, texts)) if len(c) < len(t) and ids[i, -1] == pid]
    if short:
        ids[short] = [e.ids for e in tok.encode_batch([texts[i] for i in short])]
    return ids, pid  # special tokens ([CLS] … [SEP]) added as the folder says


def _head(text: str, chars: int) -> str:
    """``text`` up to the first whitespace at or after ``chars`` characters (all of it if shorter)."""
    if len(text) <= chars:
        return text
    end = next((i for i in range(chars, len(text)) if text[i].isspace()), len(text))
    return text[:end]


def _encode_slow(texts: list[str], folder: Path, max_length: int) -> tuple[np.ndarray, int]:
    """Token ids (N, max_length) and the pad id, with ``transformers.AutoTokenizer`` (a folder without
    tokenizer.json)."""
    try:
        from transformers import AutoTokenizer  # lazy: a slow import

        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError("backbone", f"a tokenizer transformers can read in {folder} "
                                      f"({' '.join(str(e).split())[:160]})") from None
    ids = tok(texts, truncation=True, max_length=max_length, padding="max_length")["input_ids"]
    return np.array(ids, dtype=np.int64).reshape(len(texts), max_length), int(tok.pad_token_id or 0)


def encode(texts: list[str], folder: str | Path, max_length: int) -> tuple[np.ndarray, int]:
    """Token ids (N, max_length) int64 of ``texts`` and the pad id they are padded with, uncached."""
    folder = Path(folder)
    if max_length < 2:
        raise ConfigError("max_length", "at least 2 tokens per text", max_length)
    how = (_encode_fast if (folder / "tokenizer.json").is_file() else
           _encode_slow if (folder / "vocab.txt").is_file() else None)
    if how is None:
        raise ConfigError("backbone", f"a tokenizer folder holding tokenizer.json or vocab.txt ({folder} has neither)")
    try:
        return how(texts, folder, max_length)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a tokenizer's own failure on its files is the user's folder, in one line
        raise ConfigError("weights", f"a tokenizer that encodes the texts ({folder}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})") from None


def cache_key(texts: list[str], folder: str | Path, max_length: int) -> str:
    """Hex digest of the texts (in order), the tokenizer's files' names and bytes, and max_length."""
    h = hashlib.sha256(_FORMAT + b"|%d|" % max_length)
    for name in TOKENIZER_FILES:
        p = Path(folder) / name
        if p.is_file():
            data = p.read_bytes()
            h.update(b"%s:%d:" % (name.encode(), len(data)) + data)
    h.update(b"|texts|%d|" % len(texts))
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(b"%d:" % len(b) + b)
    return h.hexdigest()[:40]


def _load_cached(path: Path, shape: tuple[int, int]) -> tuple[np.ndarray, int] | None:
    """The cached (ids (N, T) int64, pad id), or None if absent; a damaged or mis-shaped file is removed."""
    if not os.path.lexists(path):
        return None
    data = read_bytes(path)  # a link or a FIFO in its place: one line, never followed or waited on
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            ids, pid = z["ids"].astype(np.int64), int(z["pad_id"])
        if ids.shape == shape:
            return ids, pid
    except _DAMAGED:
        pass
    path.unlink(missing_ok=True)
    return None


def _save(path: Path, ids: np.ndarray, pid: int) -> None:
    """Write ``ids`` (int32 on disk) and ``pid`` atomically; a cache that cannot be written is skipped."""
    small = ids.astype(np.int32) if ids.size and ids.max() < 2**31 else ids
    try:
        write_atomic(path, lambda f: np.savez(f, ids=small, pad_id=np.int64(pid)))
    except OSError:
        pass  # a read-only cache: tokenise again next time


_STORE: contextvars.ContextVar[Path | None] = contextvars.ContextVar("dpviz_token_store", default=None)


@contextlib.contextmanager
def cache_in(cache_dir):
    """Token ids cached while this is open, in this thread, go under ``cache_dir``: the store of the run that
    loads the data (`dpviz.training.prepare.prepare`), not the default store of the working folder."""
    token = _STORE.set(Path(cache_dir) if cache_dir else None)
    try:
        yield
    finally:
        _STORE.reset(token)


def cached_encode(texts: list[str], folder: str | Path, max_length: int,
                  cache_dir: str | Path | None = None) -> tuple[np.ndarray, int]:
    """`encode`, read from ``<cache>/tokens/<key>.npz`` when there, written there when not.

    Returns:
        Token ids (len(texts), max_length) int64, and the pad id.
    """
    base = Path(cache_dir) if cache_dir else _STORE.get() or default_cache_dir()
    name = f"{cache_key(texts, folder, max_length)}.npz"
    found = _load_cached(base / "tokens" / name, (len(texts), max_length))
    if found is None:
        found = encode(texts, folder, max_length)  # a refused tokenizer leaves no folder behind: made below
        try:
            base.mkdir(parents=True, exist_ok=True)
            _save(real_folder(base, "tokens") / name, *found)
        except (OSError, StoreError):
            pass  # no usable cache folder: tokenise every time
    return found
