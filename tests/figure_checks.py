"""What a drawn plotly figure shows a user, read from the page (its SVG and ``_fullData``), and the checks on it:
a title cut by its figure, several traces and no legend, a legend entry over an axis title or cut by the figure's
edge. Shared by the page walk (`test_pages_browser`) and the live charts' test (`test_browser`)."""

from __future__ import annotations

# What each plotly figure on the page draws: its title's extent against its SVG, its traces, legend, annotations.
FIGURES_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].map((p, i) => {
    const svg = p.querySelector('svg.main-svg');
    // A figure in a closed expander is not drawn (content-visibility: hidden), and Chromium's renderer crashes on
    // getComputedTextLength of a multi-line title there (nothing to catch): it counts as not displayed.
    const shown = svg && !p.closest('details:not([open])');
    const sr = shown ? svg.getBoundingClientRect() : {left: 0, top: 0, width: 0};
    const titles = !sr.width ? [] : [...p.querySelectorAll('.gtitle')].map(t => {
        const r = t.getBoundingClientRect();
        let len = 0;
        try { len = t.getComputedTextLength(); } catch (e) {}
        return {text: t.textContent, left: r.left - sr.left, right: r.right - sr.left, top: r.top - sr.top,
                width: r.width, text_len: len};
    });
    const data = (p._fullData || []).filter(t => t.visible === true);
    const names = data.map(t => t.name || '');
    const ann = ((p._fullLayout && p._fullLayout.annotations) || []).map(a => a.text || '').join(' | ');
    const layoutTitle = p.layout && p.layout.title ? (p.layout.title.text || p.layout.title) : '';
    const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const legendItems = [...p.querySelectorAll('.legend .traces')].map(box);  // what a legend draws: its entries
    const axisTitles = [...p.querySelectorAll('.g-xtitle, .g-ytitle')].filter(t => t.textContent.trim())
        .map(t => ({text: t.textContent, box: box(t)}));
    return {index: i, svg_width: sr.width, svg_box: shown ? box(svg) : [0, 0, 0, 0], title: typeof layoutTitle === 'string' ? layoutTitle : '',
            legend_items: legendItems, axis_titles: axisTitles,
            titles: titles, traces: data.length, names: names, legend: !!p.querySelector('.legend'),
            annotations: ann};
})"""


def clipped_titles(fig: dict) -> list[str]:
    """A title whose drawn text starts left of its figure's SVG, ends right of it or starts above it is cut off
    there."""
    if not fig["svg_width"]:  # not displayed (a closed expander or another tab): nothing to measure
        return []
    return [f"title {t['text']!r} spans {t['left']:.0f}…{t['right']:.0f} px of a {fig['svg_width']:.0f} px figure"
            f" from {t['top']:.0f} px under its top"
            for t in fig["titles"] if t["left"] < -1 or t["right"] > fig["svg_width"] + 1 or t["top"] < -1
            or ("<br>" not in fig["title"] and t["width"] + 1 < t["text_len"])]  # a wrapped title sums its lines


def missing_legend(fig: dict) -> str | None:
    """Several traces, no legend, and annotations that do not name them: the traces cannot be told apart."""
    if fig["traces"] < 2 or fig["legend"] or not fig["svg_width"]:
        return None
    names = [n for n in fig["names"] if n]
    if names and all(n in fig["annotations"] for n in names):
        return None
    return f"{fig['traces']} traces ({', '.join(repr(n) for n in fig['names'][:6])}) and no legend"


def covered_axis_titles(fig: dict) -> list[str]:
    """Axis titles whose drawn box overlaps a legend entry's (its line or marker and its text)."""
    if not fig["svg_width"]:
        return []
    return [f"the legend entry at {lb[0]:.0f},{lb[1]:.0f} covers axis title {t['text']!r}" for t in fig["axis_titles"]
            for lb in fig["legend_items"]
            if t["box"][0] < lb[2] - 1 and lb[0] < t["box"][2] - 1 and t["box"][1] < lb[3] - 1 and lb[1] < t["box"][3] - 1]


def cut_legend_entries(fig: dict) -> list[str]:
    """Legend entries drawn past the figure's right edge: their text is cut there."""
    if not fig["svg_width"]:
        return []
    right = fig["svg_box"][2]
    return [f"a legend entry ends at {lb[2]:.0f} px, past the figure's right edge at {right:.0f} px"
            for lb in fig["legend_items"] if lb[2] > right + 1]


def figure_problems(fig: dict) -> list[str]:
    """Every check of this module on one figure."""
    return (clipped_titles(fig) + covered_axis_titles(fig) + cut_legend_entries(fig)
            + [m for m in [missing_legend(fig)] if m])
