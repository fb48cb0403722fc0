"""Bad input files: one line naming the field and the file (exit 2), refused before anything is written.

Each case builds a bad file in the test's folder (an hf model folder, a text or image folder, a CSV) and
runs `dpviz.cli.main` in this process, the store a new folder there that the token cache would share
(``./cache``): a refused command must leave every file and folder under the test's folder as it was
(no store, no ``tokens/*.npz``). A per-test timeout turns a hang (a FIFO read) into a failure.
"""

import json
import os
import stat
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from dpviz import catalog, cli

pytestmark = pytest.mark.timeout(60)

MINILM = Path(catalog.backbone("minilm").tokenizer_dir(None))
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
TINY_BERT = dict(model_type="bert", vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=128)


def text_folder(root: Path, classes: int = 2, per_class: int = 5) -> Path:
    """``root/texts/<class>/<i>.txt``: ``classes`` classes of ``per_class`` distinct short texts."""
    d = root / "texts"
    for c in range(classes):
        (d / f"c{c}").mkdir(parents=True)
        for i in range(per_class):
            (d / f"c{c}" / f"{i}.txt").write_text(f"text {i} of class {c}\n", encoding="utf-8")
    return d


def hf_folder(root: Path, **config) -> Path:
    """``root/hf``: MiniLM's tokenizer files, a tiny BERT config.json (``config`` over it) and a whole
    model.safetensors of two tensors."""
    d = root / "hf"
    d.mkdir()
    for name in TOKENIZER_FILES:
        os.symlink(MINILM / name, d / name)
    (d / "config.json").write_text(json.dumps({**TINY_BERT, **config}))
    save_file({"embeddings.word_embeddings.weight": np.zeros((64, 32), np.float32),
               "encoder.layer.0.attention.self.query.weight": np.ones((32, 32), np.float32)},
              str(d / "model.safetensors"))
    return d


def broken_vocab(root: Path) -> Path:
    """An hf folder whose tokenizer is a vocab.txt without [UNK]: the tokenizer itself fails on the texts."""
    d = hf_folder(root)
    for name in TOKENIZER_FILES:
        (d / name).unlink()
    (d / "vocab.txt").write_text("garbage\n")
    return d


def truncated(root: Path) -> Path:
    d = hf_folder(root)
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])  # the last tensor's bytes end past the file
    return d


def garbled(root: Path) -> Path:
    d = hf_folder(root)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:8] + b"\x00garbage" + data[16:])  # the JSON header no longer parses
    return d


def png_declaring(path: Path, width: int, height: int) -> None:
    """A ~70-byte PNG whose header declares ``width`` × ``height`` pixels (a decompression bomb's header)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit greyscale
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0"))
                     + chunk(b"IEND", b""))


def image_folder(root: Path) -> Path:
    """``root/images/{a,b}/``: three small PNGs each, and a bomb in b."""
    from PIL import Image

    d = root / "images"
    for c in ("a", "b"):
        (d / c).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(d / c / f"{i}.png")
    png_declaring(d / "b" / "bomb.png", 30_000, 30_000)
    return d


def image_folder_with_a_folder_png(root: Path) -> Path:
    """`image_folder` without its bomb, and a folder named ``0.png`` beside b's images (it was skipped unseen)."""
    d = image_folder(root)
    (d / "b" / "bomb.png").unlink()
    (d / "b" / "x.png").mkdir()
    return d


def plant_in_texts(root: Path, name: str, make) -> Path:
    """`text_folder` with ``make(path)`` planting ``c1/<name>``."""
    d = text_folder(root)
    make(d / "c1" / name)
    return d


def csv_folder(root: Path, train: str, header: str = "text,label") -> Path:
    """``root/csv/{train,test}.csv``: ``header`` and ``train``'s rows, and a valid test split."""
    d = root / "csv"
    d.mkdir()
    (d / "train.csv").write_text(f"{header}\n{train}", encoding="utf-8")
    (d / "test.csv").write_text(f"text,label\n{ROWS}", encoding="utf-8")
    return d


ROWS = "".join(f"message {i} about {'ab'[i % 2]},{'ab'[i % 2]}\n" for i in range(10))
HF_RUN = ["run", "--dataset", "text-folder", "--data-dir", "TEXTS", "--backbone", "hf", "--weights", "HF"]
CSV_RUN = ["run", "--dataset", "text-csv", "--backbone", "minilm", "--data-dir", "D"]
TEXT_RUN = ["run", "--dataset", "text-folder", "--backbone", "minilm", "--data-dir"]
HUGE = dict(hidden_size=16_384, num_hidden_layers=128, intermediate_size=65_536,
            num_attention_heads=16)  # each size within its limit, together 413 billion weights: 1.5 TiB in fp32
# id: (argv, {placeholder in argv: what builds it in the test's folder}, field, what the line must name)
CASES = {
    "hf-truncated-safetensors": (HF_RUN, {"HF": truncated}, "weights", "model.safetensors"),
    "hf-vocab-without-unk": (HF_RUN, {"HF": broken_vocab}, "weights", "tokenizer"),  # left an empty tokens/
    "hf-garbled-safetensors": (HF_RUN, {"HF": garbled}, "weights", "model.safetensors"),
    "hf-vocab-1e10": (HF_RUN, {"HF": lambda r: hf_folder(r, vocab_size=1e10)}, "weights", "config.json"),
    "hf-layers-1e6": (HF_RUN, {"HF": lambda r: hf_folder(r, num_hidden_layers=10**6)}, "weights", "config.json"),
    "hf-hidden-huge": (HF_RUN, {"HF": lambda r: hf_folder(r, hidden_size=2**20, num_attention_heads=1)},
                       "weights", "config.json"),
    "hf-weights-beyond-memory": (HF_RUN, {"HF": lambda r: hf_folder(r, **HUGE)}, "weights", "memory"),
    "hf-not-bert": (HF_RUN, {"HF": lambda r: hf_folder(r, model_type="gpt2")}, "weights", "config.json"),
    "text-link-to-dev-zero": (TEXT_RUN + ["D"], {"D": lambda r: plant_in_texts(
        r, "zero.txt", lambda p: os.symlink("/dev/zero", p))}, "data_dir", "zero.txt"),
    "text-fifo": (TEXT_RUN + ["D"], {"D": lambda r: plant_in_texts(r, "fifo.txt", os.mkfifo)}, "data_dir", "fifo.txt"),
    "text-folder-named-txt": (TEXT_RUN + ["D"], {"D": lambda r: plant_in_texts(r, "sub.txt", os.mkdir)},
                              "data_dir", "sub.txt"),
    "text-over-1-mib": (TEXT_RUN + ["D"], {"D": lambda r: plant_in_texts(
        r, "big.txt", lambda p: p.write_text("word " * (2**20 // 5 + 1)))}, "data_dir", "big.txt"),
    "image-bomb": (["run", "--dataset", "folder", "--data-dir", "D"], {"D": image_folder}, "data_dir", "bomb.png"),
    "image-folder-named-png": (["run", "--dataset", "folder", "--data-dir", "D"],
                               {"D": image_folder_with_a_folder_png}, "data_dir", "x.png"),
    "csv-unclosed-quote": (CSV_RUN, {"D": lambda r: csv_folder(r, train=ROWS[:40] + 'stray,"a\n' + ROWS[40:])},
                           "data_dir", "train.csv line 4: not valid CSV"),
    "csv-quote-closed-rows-later": (CSV_RUN, {"D": lambda r: csv_folder(
        r, train=ROWS[:40] + 'stray,"a\n' + ROWS[40:80] + 'end",b\n' + ROWS[80:])}, "data_dir", "train.csv line 4"),
    "csv-two-text-columns": (CSV_RUN, {"D": lambda r: csv_folder(r, header="text,label,text",
                                                                 train=ROWS.replace("\n", ",x\n"))},
                             "data_dir", "train.csv"),
    "max-length-on-images": (["run", "--dataset", "digits", "--max-length", "32"], {}, "max_length", "digits"),
    "text-classes-of-3-texts": (TEXT_RUN + ["D"], {"D": lambda r: text_folder(r, 2, 3)}, "data_dir", "'c0' has 3"),
    "3000-classes-of-3-texts": (TEXT_RUN + ["D"], {"D": lambda r: text_folder(r, 3000, 3)}, "data_dir",
                                "texts: 3,000 classes"),
}


def listing(root: Path) -> list[tuple[str, int, int]]:
    """Every entry under ``root``: (path, mode, size of a regular file), links not followed."""
    out = []
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        out.append((str(p.relative_to(root)), st.st_mode, st.st_size if stat.S_ISREG(st.st_mode) else 0))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_file_is_one_line_and_changes_nothing(case, tmp_path, capsys, monkeypatch):
    argv, builders, field, named = CASES[case]
    monkeypatch.chdir(tmp_path)  # the token cache's default folder, ./cache, is the store's
    monkeypatch.delenv("DPVIZ_CACHE_DIR", raising=False)
    built = {"TEXTS": text_folder(tmp_path)} if "TEXTS" in argv else {}
    built.update({k: make(tmp_path) for k, make in builders.items()})
    argv = [str(built.get(a, a)) for a in argv]
    before = listing(tmp_path)
    code = cli.main(["--cache-dir", str(tmp_path / "cache"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("dpviz: error:"), err
    assert f"{field}:" in err[0] and named in err[0], err[0]
    assert listing(tmp_path) == before  # no store, no tokens/*.npz, nothing else


@pytest.mark.real
def test_the_limits_refuse_no_real_folder(tmp_path):
    """MiniLM's own folder (a real config and a whole 90 MB safetensors file) and a tiny BERT pass; the
    limits named in the errors are the ones in force."""
    from dpviz.data import MAX_CLASSES
    from dpviz.data.files import MAX_IMAGE_PIXELS
    from dpviz.data.text import MIN_TRAIN_TEXTS
    from dpviz.models.text import CONFIG_LIMITS, check_hf_folder

    assert {k: CONFIG_LIMITS[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size")} == {
        "hidden_size": 16_384, "num_hidden_layers": 128, "intermediate_size": 65_536}  # HUGE's sizes
    check_hf_folder(MINILM)
    check_hf_folder(hf_folder(tmp_path))
    assert MAX_CLASSES == 1000 and MIN_TRAIN_TEXTS == 3 and MAX_IMAGE_PIXELS == 2**26


@pytest.mark.real
def test_a_text_folder_of_links_to_regular_files_is_read(tmp_path, monkeypatch):
    """Links are followed: a folder assembled from links to real text files loads."""
    from dpviz.config import RunConfig
    from dpviz.data import load

    src = text_folder(tmp_path)
    linked = tmp_path / "linked"
    for f in src.rglob("*.txt"):
        (linked / f.parent.name).mkdir(parents=True, exist_ok=True)
        os.symlink(f, linked / f.parent.name / f.name)
    monkeypatch.setenv("DPVIZ_CACHE_DIR", str(tmp_path / "cache"))
    b = load(RunConfig(dataset="text-folder", backbone="minilm", data_dir=str(linked), max_length=8))
    assert b.classes == ("c0", "c1") and b.n + len(b.y_test) == 10
