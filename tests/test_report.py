"""A report, whole (`dpviz.studies.report`): a study's and a run's, as one HTML file that opens offline in Chromium with
the network cut, and as a PDF whose pages are A4 images with nothing past their margins."""

import json
import re

import pytest

from dpviz.cli import main

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]  # kaleido's Chromium draws the SVGs; Chromium prints


def _opened_offline(path):
    """Open ``path`` in Chromium with every request but the file itself refused: (requests made, figures drawn,
    text)."""
    from browser_util import browser

    asked = []
    with browser() as b:
        ctx = b.new_context(offline=True, viewport={"width": 1000, "height": 1200})
        page = ctx.new_page()
        page.on("request", lambda r: asked.append(r.url))
        page.route("**/*", lambda route: route.continue_() if route.request.url == path.as_uri() else route.abort())
        page.goto(path.as_uri())
        drawn = page.evaluate("[...document.querySelectorAll('figure svg')]"
                              ".filter(s => s.getBoundingClientRect().width > 300).length")
        text = page.inner_text("body")
    return asked, drawn, text


def _pages(pdf_path, dpi: int = 150):
    import numpy as np
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(pdf_path))
    return [(doc[i].get_size(), np.asarray(doc[i].render(scale=dpi / 72).to_pil().convert("L"))) for i in range(len(doc))]


def _check_pdf(pdf_path):
    """Every page A4 (595 × 842 pt), drawn, and blank in its outer 10 mm: nothing overflows the margins."""
    pages = _pages(pdf_path)
    assert pages
    edge = int(10 / 25.4 * 150)  # 10 mm at 150 dpi
    for i, ((w, h), img) in enumerate(pages):
        assert abs(w - 595.3) < 1.5 and abs(h - 841.9) < 1.5, (i, w, h)
        assert img.shape == (round(h * 150 / 72), round(w * 150 / 72)) or abs(img.shape[0] - h * 150 / 72) < 2
        inner = img[edge:-edge, edge:-edge]
        assert (inner < 200).mean() > 0.002, f"page {i} is blank"
        for band in (img[:edge], img[-edge:], img[:, :edge], img[:, -edge:]):
            assert (band < 200).mean() < 0.0005, f"page {i}: something is drawn past the margins"
    return pages


def test_a_study_report_is_one_offline_html_file_and_an_a4_pdf(tmp_path, capsys):
    """From the shipped results of the noise study: its reading, figure, numbers per seed, the private
    statistics marked, where the numbers come from and the command that reproduces them."""
    assert main(["--cache-dir", str(tmp_path / "store"), "report", "--study", "noise", "--out", str(tmp_path)]) == 0
    html_path, pdf_path = (tmp_path / "dpviz_report_noise_default.html", tmp_path / "dpviz_report_noise_default.pdf")
    assert capsys.readouterr().out.split() == [str(html_path), str(pdf_path)]
    page = html_path.read_text()
    assert not re.search(r"(src|href)=[\"']?https?:|<script|@import|url\((?![\"']?#)", page)
    asked, drawn, text = _opened_offline(html_path)
    assert asked == [html_path.as_uri()] and drawn == 1, (asked, drawn)
    assert "Per seed" in text and "seed 2" in text and "python -m dpviz study run noise --task default" in text
    assert "NOT covered by the DP guarantee" in text and "Shipped with dpviz" in text
    shipped = json.loads((__import__("dpviz.studies.results", fromlist=["SHIPPED"]).SHIPPED
                          / "noise_default.json").read_text())
    one = shipped["cells"][0]["runs"]["1"]["values"]["accuracy"]
    assert f"{one:.3f}" in text  # a per-seed number, as stored
    _check_pdf(pdf_path)


@pytest.mark.slow
def test_a_run_report_holds_its_privacy_statement_figures_and_a_config_that_reproduces_it(tmp_path, fast_cfg,
                                                                                         cache_dir):
    import dpviz
    from dpviz.config import RunConfig
    from dpviz.store import Store

    s = dpviz.run(fast_cfg(strategy="fft", epsilon=2.0, checkpoint_every=6), cache_dir=cache_dir)
    rid = s["run_id"]
    assert main(["--cache-dir", str(cache_dir), "report", rid, "--out", str(tmp_path)]) == 0
    html_path = tmp_path / f"dpviz_report_{rid}.html"
    asked, drawn, text = _opened_offline(html_path)
    assert asked == [html_path.as_uri()] and drawn >= 3, (asked, drawn)  # accuracy, loss, ε spent, the law
    for said in ("ε requested", "ε spent", "accountant", "mechanism\tDP-SGD", "privacy check",
                 "python -m dpviz run --config run.json", "NOT covered by the DP guarantee"):
        assert said in text, said
    config = json.loads(re.search(r"<pre>(\{.*?\})</pre>", html_path.read_text(), re.S).group(1).replace(
        "&quot;", '"').replace("&#x27;", "'"))
    assert RunConfig.from_dict(config).hash() == Store(cache_dir).get_run(rid)["config_hash"]
    _check_pdf(tmp_path / f"dpviz_report_{rid}.pdf")


def test_a_report_refuses_what_it_cannot_write_in_one_line(tmp_path, capsys):
    assert main(["--cache-dir", str(tmp_path), "report", "--out", str(tmp_path / "out")]) == 2
    assert main(["--cache-dir", str(tmp_path), "report", "nope-run", "--no-pdf", "--out", str(tmp_path / "out")]) == 2
    assert main(["--cache-dir", str(tmp_path), "report", "--study", "noise", "--task", "default", "--scale",
                 "large", "--no-pdf", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("dpviz: error: ") for line in err), err
    assert err[2].startswith("dpviz: error: scale: a size default has"), err
    assert not (tmp_path / "out").exists()
