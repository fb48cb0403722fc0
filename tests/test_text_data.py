"""Text data: the package corpora read from their real files, dpviz's generated public phrases, a user's
CSV and folders, the token cache, and Fashion-MNIST from Debian's files."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from dpviz import catalog
from dpviz.catalog import Shape
from dpviz.config import RunConfig
from dpviz.data import load, tokens
from dpviz.data.corpora import dedupe, read_bbc_news, read_tweets, stratified_split, text_key, title_key
from dpviz.errors import ConfigError

pytestmark = pytest.mark.real  # the package corpora, MiniLM's tokenizer, Debian's Fashion-MNIST

TOPICS = ("business", "entertainment", "politics", "sports", "tech")
SENTIMENTS = ("negative", "positive")
MINILM = Path(catalog.backbone("minilm").tokenizer_dir(None))
FASHION = Path("/usr/share/datasets/fashion-mnist")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def token_cache(tmp_path_factory):
    """One token cache for the module (the real corpora are tokenised once)."""
    d = tmp_path_factory.mktemp("tokens-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPVIZ_CACHE_DIR", str(d))
        yield d


@pytest.fixture(scope="module")
def corpora(token_cache):
    """The four built-in text tasks, loaded once with MiniLM's tokenizer and 64 tokens."""
    return {name: catalog.dataset(name).load(None)
            for name in ("bbc-news", "tweets", "phrases-sentiment", "phrases-topics")}


def _cfg(dataset: str, **kw) -> RunConfig:
    return RunConfig(dataset=dataset, backbone="minilm", **kw)


def _one_line_error(cfg, *needles: str) -> str:
    with pytest.raises(ConfigError) as e:
        load(cfg)
    msg = str(e.value)
    assert e.value.field == "data_dir" and msg.startswith("data_dir: ") and "\n" not in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


# ---- the package corpora ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,n_test,classes,per_class", [
    ("bbc-news", 419, TOPICS, (500, 365, 397, 500, 333)),
    ("tweets", 1476, SENTIMENTS, (3688, 3688)),  # balanced: negatives cut to the positives' count
    ("phrases-sentiment", 500, SENTIMENTS, (1000, 1000)),
    ("phrases-topics", 500, TOPICS, (400,) * 5),
])
def test_counts_labels_and_catalogue_shape(corpora, name, n_test, classes, per_class):
    b = corpora[name]
    assert b.name == name and b.modality == "text" and b.classes == classes and b.num_classes == len(classes)
    assert catalog.dataset(name).shape == Shape(b.n, 0, 0, len(classes))  # previews know n without loading
    assert len(b.y_test) == n_test == len(b.texts_test)
    for x, y in ((b.x_train, b.y_train), (b.x_test, b.y_test)):
        assert x.dtype == y.dtype == torch.int64 and x.shape == (len(y), 64) and x.is_contiguous()
        assert y.min() == 0 and y.max() == len(classes) - 1
        assert (x[:, 0] == 101).all()  # [CLS] first
        full = x[:, -1] != 0  # rows truncated to 64 tokens (or exactly that long) end with [SEP]
        assert (x[full, -1] == 102).all() and (full.any() or name.startswith("phrases"))
    counts = torch.bincount(torch.cat([b.y_train, b.y_test]), minlength=len(classes)).tolist()
    assert tuple(counts) == per_class
    test_share = torch.bincount(b.y_test).float() / torch.tensor(per_class)  # (K,)
    assert (test_share - n_test / sum(per_class)).abs().max() < 0.01  # stratified


def test_real_corpora_as_read():
    """2,225 BBC files, 5 topics; 19,009 confident positive/negative tweets; the duplicates found."""
    texts, labels = read_bbc_news()
    assert len(texts) == 2225 and Counter(labels) == {"business": 510, "entertainment": 386, "politics": 417,
                                                      "sports": 511, "tech": 401}
    assert any("£15.8m" in t for t in texts)  # the one latin-1 file (sports/199.txt) read right
    assert len(dedupe(texts, labels)[0]) == 2122  # 98 byte-identical copies, 5 more up to case, spaces, punctuation
    assert len(dedupe(*dedupe(texts, labels), key=title_key)[0]) == 2095
    t, y = read_tweets()
    assert len(t) == 19009 and set(y) == set(SENTIMENTS) and all(s.strip() for s in t)
    assert Counter(dedupe(t, y)[1]) == {"negative": 14074, "positive": 3688}


@pytest.mark.parametrize("name", ["bbc-news", "tweets"])
def test_no_text_in_both_splits(corpora, name):
    """The loader's test split is the fixed split of the deduplicated corpus; no train text equals a test
    text (even up to case, punctuation and links), nor does any test row of token ids equal a train row."""
    texts, labels = (dedupe(*read_bbc_news(), key=title_key) if name == "bbc-news" else read_tweets())
    texts, labels = dedupe(texts, labels)
    b = corpora[name]
    test = set(b.texts_test)
    assert len(test) == len(b.texts_test) and test <= set(texts)
    train_keys = {text_key(t) for t in texts if t not in test}
    assert not train_keys & {text_key(t) for t in test}
    rows = {tuple(r) for r in b.x_train.tolist()}
    assert not any(tuple(r) in rows for r in b.x_test.tolist())


def test_split_independent_of_the_run_seed(token_cache):
    torch.manual_seed(1)
    np.random.seed(1)
    a = load(_cfg("tweets", seed=1))
    torch.manual_seed(2)
    np.random.seed(2)
    b = load(_cfg("tweets", seed=2))
    assert a.texts_test == b.texts_test and torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    labels = ["a", "b", "b"] * 10
    i_tr, i_te = stratified_split(labels)
    assert i_te.tolist() == stratified_split(labels)[1].tolist() and len(i_te) == 6 and not set(i_tr) & set(i_te)


# ---- dpviz's public phrases -------------------------------------------------------------------------

def test_phrases_match_their_private_tasks_and_are_public(corpora):
    for public, private in (("phrases-sentiment", "tweets"), ("phrases-topics", "bbc-news")):
        assert catalog.dataset(public).public and catalog.dataset(private).proxy == public
        assert corpora[public].classes == corpora[private].classes
        assert catalog.dataset(public).shape.num_classes == catalog.dataset(private).shape.num_classes
    private = {text_key(t) for t in read_bbc_news()[0] + read_tweets()[0]}
    for name in ("phrases-sentiment", "phrases-topics"):
        again = catalog.dataset(name).load(None)  # deterministic: the same sentences, ids and labels
        b = corpora[name]
        assert again.texts_test == b.texts_test and torch.equal(again.x_train, b.x_train)
        assert torch.equal(again.y_train, b.y_train)
        assert not {text_key(t) for t in b.texts_test} & private
        train_rows = {tuple(r) for r in b.x_train.tolist()}
        assert not any(tuple(r) in train_rows for r in b.x_test.tolist())  # distinct sentences


def test_phrases_need_their_words_but_are_not_trivial(corpora):
    """A bag of words learns them well, yet not perfectly (filler, distractors, negation, coin tosses)."""
    for name, low in (("phrases-sentiment", 0.7), ("phrases-topics", 0.85)):
        b = corpora[name]
        vocab = torch.unique(torch.cat([b.x_train, b.x_test]))  # (V,) the ids in use
        bow = lambda x: torch.zeros(len(x), len(vocab)).scatter_(1, torch.searchsorted(vocab, x), 1.0)  # noqa: E731
        x, y = bow(b.x_train), torch.nn.functional.one_hot(b.y_train).float()  # (N, V) word presence, (N, K)
        w = torch.linalg.solve(x.T @ x + torch.eye(len(vocab)), x.T @ y)  # ridge regression (V, K)
        acc = ((bow(b.x_test) @ w).argmax(1) == b.y_test).float().mean().item()
        assert low < acc < 0.99, (name, acc)


# ---- the user's text files -------------------------------------------------------------------------------

def _write_csv(path: Path, rows, header="text,label") -> None:
    path.write_text(header + "\n" + "".join(f'"{t}",{y}\n' for t, y in rows), encoding="utf-8")


def _rows(n: int, labels=("spam", "ham", "eggs")) -> list[tuple[str, str]]:
    return [(f"message number {i} about {labels[i % len(labels)]}", labels[i % len(labels)]) for i in range(n)]


def test_text_csv_splits(tmp_path, token_cache):
    _write_csv(tmp_path / "train.csv", _rows(12))
    _write_csv(tmp_path / "test.csv", _rows(6)[::-1])
    b = load(_cfg("text-csv", data_dir=str(tmp_path), max_length=16))
    assert b.classes == ("eggs", "ham", "spam") and b.n == 12 and b.x_train.shape == (12, 16)
    assert b.texts_test[0] == "message number 5 about eggs" and b.y_test[0] == 0
    one = tmp_path / "one"
    one.mkdir()
    rows = _rows(30) + [(t.upper(), y) for t, y in _rows(3)]  # 3 duplicates (up to case)
    (one / "data.csv").write_text("label,text\n" + "".join(f'{y},"{t}"\n' for t, y in rows), encoding="utf-8-sig")
    b = load(_cfg("text-csv", data_dir=str(one), max_length=16))
    assert b.n + len(b.y_test) == 30 and len(b.y_test) == 6  # duplicates dropped, then 80/20 by class
    assert set(b.texts_test) <= {t for t, _ in _rows(30)} and torch.bincount(b.y_test).tolist() == [2, 2, 2]


def test_text_csv_errors(tmp_path, token_cache):
    cfg = _cfg("text-csv", data_dir=str(tmp_path), max_length=16)
    _one_line_error(_cfg("text-csv", data_dir=str(tmp_path / "nope")), "is not a folder", "train.csv")
    _one_line_error(cfg, "no train.csv and test.csv, nor data.csv")
    _write_csv(tmp_path / "train.csv", _rows(6))
    _one_line_error(cfg, "only one of train.csv and test.csv")
    _write_csv(tmp_path / "test.csv", _rows(6), header="body,label")
    _one_line_error(cfg, "test.csv has no column text", "body, label")
    _write_csv(tmp_path / "test.csv", _rows(6, labels=("zzz",)))
    _one_line_error(cfg, "has classes not in", "zzz")
    _write_csv(tmp_path / "train.csv", _rows(6, labels=("one",)))
    _one_line_error(cfg, "at least 2 classes", "found 1: one")
    _write_csv(tmp_path / "train.csv", _rows(4) + [("  ", "spam")])
    _one_line_error(cfg, "train.csv line 6: an empty text")
    (tmp_path / "train.csv").write_bytes(b"text,label\n\"caf\xe9\",spam\n")
    _one_line_error(cfg, "cannot read", "train.csv as UTF-8", "0xe9")


def test_text_folder_layouts_and_errors(tmp_path, token_cache):
    for split, n in (("train", 4), ("test", 2)):
        for c in ("sport", "arts"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(n):
                (tmp_path / split / c / f"{i}.txt").write_text(f"{split} {c} text {i}\n", encoding="utf-8")
    cfg = _cfg("text-folder", data_dir=str(tmp_path), max_length=8)
    b = load(cfg)
    assert b.classes == ("arts", "sport") and b.n == 8 and b.x_test.shape == (4, 8)
    assert b.texts_test[0] == "test arts text 0" and b.y_test.tolist() == [0, 0, 1, 1]
    flat = tmp_path / "train"
    b = load(_cfg("text-folder", data_dir=str(flat), max_length=8))
    assert b.n == 6 and len(b.y_test) == 2 and b.y_test.tolist() == [0, 1]
    (tmp_path / "test" / "sport" / "0.txt").write_bytes(b"\xff\xfe\x00")
    _one_line_error(cfg, "cannot read", "0.txt as UTF-8")
    (tmp_path / "test" / "sport" / "0.txt").write_text(" \n", encoding="utf-8")
    _one_line_error(cfg, "0.txt is empty")
    shutil.rmtree(tmp_path / "test")
    _one_line_error(cfg, "only one of train/ and test/")
    shutil.rmtree(flat / "arts")
    _one_line_error(_cfg("text-folder", data_dir=str(flat)), "at least 2 classes")
    _one_line_error(_cfg("text-folder", data_dir=str(tmp_path / "nope")), "is not a folder")


# ---- tokenising and its cache --------------------------------------------------------------------------

def test_token_cache_hits_keys_and_recovers(tmp_path, monkeypatch, token_cache):
    monkeypatch.setenv("DPVIZ_CACHE_DIR", str(tmp_path))
    a = load(_cfg("phrases-topics", max_length=24))
    files = list((tmp_path / "tokens").glob("*.npz"))
    assert len(files) == 1
    pad = tokens.pad_id(MINILM)
    assert pad == a.pad_id == 0 and (a.x_train[:, -1] == pad).all()  # short sentences: padded on the right
    lengths = (a.x_train != pad).sum(1)
    assert torch.equal(a.x_train[torch.arange(len(lengths)), lengths - 1], torch.full_like(lengths, 102))  # [SEP]

    def no_tokenizer(*args):
        raise AssertionError("the tokenizer ran on a cache hit")
    with monkeypatch.context() as m:
        m.setattr(tokens, "encode", no_tokenizer)
        assert torch.equal(load(_cfg("phrases-topics", max_length=24)).x_train, a.x_train)
    b = load(_cfg("phrases-topics", max_length=32))  # another max length: another key
    assert b.x_train.shape[1] == 32 and len(list((tmp_path / "tokens").glob("*.npz"))) == 2
    assert torch.equal(b.x_train[:, :24][lengths < 24], a.x_train[lengths < 24])
    for garbage in (b"not a zip file", files[0].read_bytes()[:100]):
        files[0].write_bytes(garbage)  # damaged: removed and tokenised again
        assert torch.equal(load(_cfg("phrases-topics", max_length=24)).x_train, a.x_train)
        assert np.load(files[0])["ids"].shape == (2000, 24)  # both splits


def test_the_pad_id_is_the_tokenizers(tmp_path):
    """A tokenizer whose pad token is not id 0 pads with its own id, and says so (the Bundle's pad_id)."""
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(MINILM / name, tmp_path / name)
    (tmp_path / "tokenizer_config.json").write_text('{"pad_token": "[unused0]"}')
    ids, pid = tokens.encode(["a short text"], tmp_path, 10)
    assert pid == 1 and ids[0, -1] == 1 and 0 not in ids
    (tmp_path / "tokenizer.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read .*tokenizer.json"):
        tokens.encode(["a short text"], tmp_path, 10)


def test_long_texts_are_cut_before_tokenising_with_the_same_ids():
    """Tokenising only a long text's head gives the ids of the whole text: plain articles, a text of long
    one-token words (its head is too short: tokenised again whole), a text without any space."""
    from tokenizers import Tokenizer

    texts = read_bbc_news()[0][:60] + ["international " * 400, "x" * 3000, "short"]
    for length in (16, 128):
        whole = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
        whole.enable_truncation(max_length=length)
        whole.enable_padding(length=length, pad_id=0)
        ids, _ = tokens.encode(texts, MINILM, length)
        assert ids.tolist() == [e.ids for e in whole.encode_batch(texts)]


def test_token_key_covers_tokenizer_files_and_texts(tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(MINILM / name, folder / name)
    k = tokens.cache_key(["a b", "c"], MINILM, 16)
    assert k == tokens.cache_key(["a b", "c"], folder, 16)
    assert len({k, tokens.cache_key(["a", "b c"], MINILM, 16), tokens.cache_key(["a b", "c"], MINILM, 17)}) == 3
    (folder / "vocab.txt").write_text((MINILM / "vocab.txt").read_text() + "newword\n")
    assert tokens.cache_key(["a b", "c"], folder, 16) != k


def test_vocab_only_folder_goes_through_transformers(tmp_path):
    """A folder without tokenizer.json (vocab.txt and its config) gives the same ids via AutoTokenizer."""
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(MINILM / name, tmp_path / name)
    texts = ["The striker scored twice!", "Shares fell 3% on Monday, analysts said."]
    slow, fast = tokens.encode(texts, tmp_path, 12), tokens.encode(texts, MINILM, 12)
    assert slow[0].tolist() == fast[0].tolist() and slow[1] == fast[1] == 0
    with pytest.raises(ConfigError, match="tokenizer.json or vocab.txt"):
        tokens.encode(texts, tmp_path / "nothing", 12)


@pytest.mark.subprocess
def test_loading_text_imports_no_transformers(tmp_path):
    code = ("import sys, dpviz.data.text as t; t.load_phrases_sentiment(); "
            "print('transformers' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), DPVIZ_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env=env)
    assert out.stdout.strip() == "False", out.stderr[-400:]


# ---- Fashion-MNIST from Debian's package ---------------------------------------------------------------

def test_fashion_mnist_from_debian():
    if not FASHION.is_dir():  # in CI a missing package fails, as Chromium does: .ci/run installs it
        if os.environ.get("CI"):
            pytest.fail("Debian's dataset-fashion-mnist is missing in CI (.ci/run installs it)")
        pytest.skip("Debian's dataset-fashion-mnist is not installed (apt install dataset-fashion-mnist)")
    b = load(RunConfig(dataset="fashion-mnist"))  # no data_dir: the catalogue's default folder
    assert b.x_train.shape == (60000, 1, 28, 28) and b.x_test.shape == (10000, 1, 28, 28)
    assert b.y_train[:5].tolist() == [9, 0, 0, 3, 0] and b.y_test[:5].tolist() == [9, 2, 1, 1, 6]
    assert torch.bincount(b.y_train).tolist() == [6000] * 10 and torch.bincount(b.y_test).tolist() == [1000] * 10
    assert b.x_train.min() == -1 and b.x_train.max() == 1 and b.classes[9] == "Ankle boot"
    assert catalog.dataset("fashion-mnist").shape == Shape(b.n, 1, 28, 10)


def test_fashion_mnist_gz_in_a_data_dir(tmp_path, monkeypatch):
    """A data folder may hold the files gzipped, nested (FashionMNIST/raw/) or flat."""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    x = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    y = np.arange(5, dtype=np.uint8)
    for s in ("train", "t10k"):
        (raw / f"{s}-images-idx3-ubyte.gz").write_bytes(gzip.compress(
            b"\0\0\x08\x03" + np.array([5, 28, 28], ">u4").tobytes() + x.tobytes()))
        (raw / f"{s}-labels-idx1-ubyte").write_bytes(b"\0\0\x08\x01" + np.array([5], ">u4").tobytes() + y.tobytes())
    b = load(RunConfig(dataset="fashion-mnist", data_dir=str(tmp_path)))
    assert torch.equal(b.x_test[:, 0], torch.from_numpy(x).float() / 255 * 2 - 1) and b.y_train.tolist() == [0, 1, 2, 3, 4]
    b = load(RunConfig(dataset="fashion-mnist", data_dir=str(raw)))
    assert b.n == 5
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"\0\0\x08\x01" + np.array([9], ">u4").tobytes() + y.tobytes())
    _one_line_error(RunConfig(dataset="fashion-mnist", data_dir=str(tmp_path)), "cannot read", "t10k-labels")
    entry = catalog.dataset("fashion-mnist")
    monkeypatch.setitem(catalog.DATASETS, "fashion-mnist", replace(entry, default_dir=str(tmp_path / "absent")))
    with pytest.raises(ConfigError) as e:
        load(RunConfig(dataset="fashion-mnist"))
    assert "absent is not a folder" in str(e.value) and "dataset-fashion-mnist" in str(e.value)


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_runs_token_ids_are_cached_in_its_own_store(tmp_path):
    """``--cache-dir`` (and ``dpviz.run(cache_dir=…)``) keeps a text dataset's token ids in that store, never in
    a ``cache/`` of the working folder."""
    import subprocess
    import sys

    data = tmp_path / "texts"
    data.mkdir()
    _write_csv(data / "train.csv", _rows(24))
    _write_csv(data / "test.csv", _rows(9))
    env = {k: v for k, v in os.environ.items() if k != "DPVIZ_CACHE_DIR"}
    env.update(PYTHONPATH=str(ROOT), DPVIZ_BACKGROUND_ANALYSES="off")
    out = subprocess.run([sys.executable, "-m", "dpviz", "--cache-dir", "store", "run", "--dataset", "text-csv",
                          "--data-dir", str(data), "--backbone", "minilm", "--max-length", "16", "--strategy", "lp",
                          "--epochs", "1", "--batch-size", "8", "--lr-lp", "0.5", "--quiet"],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-1500:]
    assert list((tmp_path / "store" / "tokens").glob("*.npz")) and not (tmp_path / "cache").exists()
