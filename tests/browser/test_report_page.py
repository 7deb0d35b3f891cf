"""`motley report` pages in a real browser: headless Chromium from Debian renders each page with no
console error and nothing fetched; the rendered DOM holds every section, and each chart its marks —
drawn with a nonzero size, each carrying the value it stands for in its title — and a screenshot shows
each chart's colour beyond its legend's square. No pixel count depends on which plan a run chose or on
how a browser antialiases: a missing chart, an empty one or one drawn in no colour fails. Skipped where
Chromium is absent (scripts/setup.sh installs it)."""
import html.parser
import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

SOURCE = os.environ.get("MOTLEY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MOTLEY_BIN", os.path.join(SOURCE, "build", "motley"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")

# The charts' colours (src/cli/report_svg.cc, report_page.cc).
COMPUTE, COMMUNICATION, COPIES = (0x4E, 0x79, 0xA7), (0xF2, 0x8E, 0x2B), (0x59, 0xA1, 0x4F)
PREDICTED_MEMORY, MEASURED_MEMORY = (0x7A, 0x9C, 0xC6), (0xE1, 0x57, 0x59)
STRATEGY, CHOSEN = (0x9D, 0xB4, 0xCF), (0x2F, 0x4B, 0x7C)
# A legend's square is 12x10 pixels: a colour that covers more was drawn by a chart.
LEGEND_PIXELS = 12 * 10
# A chart's value as its title writes it: a number and, for bytes and durations, a unit.
NUMBER = r"[0-9]+(\.[0-9]+)?"

def motley(*args, cwd=SOURCE):
    out = subprocess.run([BIN, *args], capture_output=True, text=True, cwd=cwd, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def chromium(page, tmp_path, *flags):
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
           *flags, f"file://{page}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, rows, channels


def colour_counts(path, colours):
    width, height, rows, channels = png_pixels(path)
    counts = {c: 0 for c in colours}
    for line in rows:
        for x in range(0, width * channels, channels):
            px = (line[x], line[x + 1], line[x + 2])
            if px in counts:
                counts[px] += 1
    return counts


class Marks(html.parser.HTMLParser):
    """The marks (rect, circle, polyline) of every svg chart in a DOM: {svg id: [{"class", "width", "height",
    "title"}]}."""

    def __init__(self):
        super().__init__()
        self.charts, self.svg, self.mark, self.in_title = {}, None, None, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and a.get("id"):
            self.svg = a["id"]
            self.charts[self.svg] = []
        elif self.svg and tag in ("rect", "circle", "polyline"):
            r = float(a.get("r", 0))
            points = (a.get("points") or "").split()
            xs = [float(p.split(",")[0]) for p in points] or [0.0]
            ys = [float(p.split(",")[1]) for p in points] or [0.0]
            self.mark = {"class": (a.get("class") or "").split(), "title": "", "points": len(points),
                         "width": float(a.get("width", 2 * r)) if tag != "polyline" else max(xs) - min(xs),
                         "height": float(a.get("height", 2 * r)) if tag != "polyline" else max(1.0, max(ys) - min(ys))}
            self.charts[self.svg].append(self.mark)
        elif self.mark is not None and tag == "title":
            self.in_title = True

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = None
        elif tag in ("rect", "circle", "polyline"):
            self.mark = None
        elif tag == "title":
            self.in_title = False

    def handle_data(self, data):
        if self.in_title and self.mark is not None:
            self.mark["title"] += data


def chart_marks(dom, chart, kind, title):
    """The marks of class `kind` in svg `chart`: at least one, each with a nonzero size and a title
    that matches `title` (a regular expression holding the value the mark stands for)."""
    parser = Marks()
    parser.feed(dom)
    assert chart in parser.charts, f"no chart {chart}"
    marks = [m for m in parser.charts[chart] if kind in m["class"]]
    assert marks, f"chart {chart} draws no {kind}"
    for m in marks:
        assert m["width"] > 0 and m["height"] > 0, (chart, kind, m)
        assert re.search(title, m["title"]), (chart, kind, m["title"], title)
    return marks


def check_page(page, tmp_path, sections, colours):
    """`colours`: the colours the screenshot must show beyond a legend's square."""
    dom = chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for section in sections:
        assert f'id="{section}"' in dom.stdout, section
    problems = [l for l in dom.stderr.splitlines()
                if "CONSOLE" in l or "Uncaught" in l or "Failed to load resource" in l]
    assert not problems, problems
    shot = tmp_path / (os.path.basename(page) + ".png")
    r = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,4000")
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    counts = colour_counts(shot, colours)
    for colour in colours:
        assert counts[colour] > LEGEND_PIXELS, \
            f"{page}: #{bytes(colour).hex()} covers {counts[colour]} pixels: no chart drew it beyond its legend"
    return dom.stdout, counts


def timeline_marks(dom, chart, kinds):
    for kind in kinds:
        chart_marks(dom, chart, kind, rf": {kind} {NUMBER}")


def memory_marks(dom, measured=False):
    chart_marks(dom, "memory-chart", "capacity", rf"capacity {NUMBER}")
    predicted = chart_marks(dom, "memory-chart", "predicted", rf"predicted peak {NUMBER}")
    if measured:
        chart_marks(dom, "memory-chart", "measured", rf"measured peak {NUMBER}")
    # The screenshot shows the predicted colour where a bar within capacity is drawn wide enough to
    # hold a whole pixel (a bar over capacity is drawn red).
    return PREDICTED_MEMORY if any("over" not in m["class"] and m["width"] >= 2 for m in predicted) else None


def compare_marks(dom):
    bars = chart_marks(dom, "compare-chart", "bar", rf"{NUMBER} tokens/s, step {NUMBER}")
    assert sum("chosen" in b["class"] for b in bars) == 1, "the chosen strategy's bar"
    return [STRATEGY, CHOSEN] if len(bars) > 1 else [CHOSEN]


def test_the_default_jobs_page(tmp_path):
    page = tmp_path / "default.html"
    motley("report", "--job", "default", "-o", str(page))
    sections = ["summary", "cluster", "timeline-simulated", "memory-chart", "compare-chart"]
    html_text = page.read_text()
    timeline_marks(html_text, "timeline-simulated", ["compute"])
    colours = [COMPUTE, memory_marks(html_text), *compare_marks(html_text)]
    dom, _ = check_page(page, tmp_path, sections, [c for c in colours if c])
    timeline_marks(dom, "timeline-simulated", ["compute"])  # the browser's DOM holds them too
    assert "deepspeed-even" in dom and "poplar" in dom


def test_a_zorse_plan_on_published_timings(tmp_path):
    page = tmp_path / "zorse.html"
    args = ["report", "--plan", os.path.join(SOURCE, "examples", "plans", "zorse-a-llama-65b.toml"), "-o", str(page)]
    published = os.path.join(SOURCE, "..", "shared", "data", "zorse-measured", "model_latencies.json")
    if os.path.exists(published):  # the published timings beside the repository, else the roofline
        args += ["--profile", published]
    motley(*args)
    html_text = page.read_text()
    # A Zorse pipeline computes, sends activations and gradients, and copies its offloaded ministages.
    timeline_marks(html_text, "timeline-simulated", ["compute", "communication", "copies"])
    colours = [COMPUTE, COMMUNICATION, COPIES, memory_marks(html_text), *compare_marks(html_text)]
    dom, _ = check_page(page, tmp_path, ["summary", "cluster", "timeline-simulated", "memory-chart", "compare-chart"],
                        [c for c in colours if c])
    assert dom.count('class="dev"') == 20  # every device of cluster A in the plan


def test_a_runs_page_lays_the_measured_step_beside_the_simulated(tmp_path):
    motley("train", "default", "--steps", "4", "--baseline-steps", "0", cwd=tmp_path)
    run = tmp_path / "checkpoints" / "default"
    assert (run / "trace.json").exists()
    out = motley("report", "--run", str(run), "--no-compare", cwd=tmp_path)
    page = run / "report.html"
    assert str(page) in out or "report.html" in out
    html_text = page.read_text()
    for chart in ("timeline-simulated", "timeline-measured"):
        timeline_marks(html_text, chart, ["compute"])
    predicted = memory_marks(html_text, measured=True)
    # Four steps: the loss and the throughput as lines through a point per logged step.
    for chart, series in (("loss-chart", "loss"), ("tokens-chart", "tokens/s")):
        lines = [m for m in chart_marks(html_text, chart, "series", ".") if m["title"] == series]
        assert lines and lines[0]["points"] >= 2, (chart, lines)
    colours = [COMPUTE, MEASURED_MEMORY] + ([predicted] if predicted else [])
    dom, _ = check_page(page, tmp_path, ["summary", "timeline-simulated", "timeline-measured", "memory-chart",
                                         "loss-chart", "tokens-chart"], colours)
    assert "median step" in dom
