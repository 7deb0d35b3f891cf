"""`motley report` pages in a real browser: headless Chromium from Debian renders each page with no
console error and nothing fetched, the DOM holds every section, and a screenshot shows the charts'
colours (the timeline's compute, communication and copy bands, the memory bars). Skipped where
Chromium is absent (scripts/setup.sh installs it)."""
import os
import shutil
import struct
import subprocess
import zlib

import pytest

SOURCE = os.environ.get("MOTLEY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MOTLEY_BIN", os.path.join(SOURCE, "build", "motley"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")

# The charts' colours (src/cli/report_svg.cc, report_page.cc). Each legend square is 12x10 pixels:
# the counts asked for below are charts' areas, far beyond a legend.
COMPUTE, COMMUNICATION, COPIES = (0x4E, 0x79, 0xA7), (0xF2, 0x8E, 0x2B), (0x59, 0xA1, 0x4F)
PREDICTED_MEMORY, MEASURED_MEMORY = (0x7A, 0x9C, 0xC6), (0xE1, 0x57, 0x59)
STRATEGY, CHOSEN = (0x9D, 0xB4, 0xCF), (0x2F, 0x4B, 0x7C)


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


def check_page(page, tmp_path, sections, colours):
    """`colours`: {rgb: the fewest pixels of it the screenshot must show}."""
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
    for colour, least in colours.items():
        assert counts[colour] >= least, f"{page}: #{bytes(colour).hex()} covers {counts[colour]} pixels, not {least}"
    return dom.stdout, counts


def test_the_default_jobs_page(tmp_path):
    page = tmp_path / "default.html"
    motley("report", "--job", "default", "-o", str(page))
    dom, _ = check_page(page, tmp_path, ["summary", "cluster", "timeline-simulated", "memory-chart", "compare-chart"],
                        {COMPUTE: 10000, PREDICTED_MEMORY: 500, STRATEGY: 20000, CHOSEN: 3000})
    assert "deepspeed-even" in dom and "poplar" in dom


def test_a_zorse_plan_on_published_timings(tmp_path):
    page = tmp_path / "zorse.html"
    args = ["report", "--plan", os.path.join(SOURCE, "examples", "plans", "zorse-a-llama-65b.toml"), "-o", str(page)]
    published = os.path.join(SOURCE, "..", "shared", "data", "zorse-measured", "model_latencies.json")
    if os.path.exists(published):  # the published timings beside the repository, else the roofline
        args += ["--profile", published]
    motley(*args)
    dom, _ = check_page(page, tmp_path, ["summary", "cluster", "timeline-simulated", "memory-chart", "compare-chart"],
                        {COMPUTE: 50000, COMMUNICATION: 5000, COPIES: 1000, PREDICTED_MEMORY: 50000, STRATEGY: 20000})
    assert dom.count('class="dev"') == 20  # every device of cluster A in the plan


def test_a_runs_page_lays_the_measured_step_beside_the_simulated(tmp_path):
    motley("train", "default", "--steps", "4", "--baseline-steps", "0", cwd=tmp_path)
    run = tmp_path / "checkpoints" / "default"
    assert (run / "trace.json").exists()
    out = motley("report", "--run", str(run), "--no-compare", cwd=tmp_path)
    page = run / "report.html"
    assert str(page) in out or "report.html" in out
    dom, _ = check_page(page, tmp_path, ["summary", "timeline-simulated", "timeline-measured", "memory-chart",
                                         "loss-chart", "tokens-chart"],
                        {COMPUTE: 20000, PREDICTED_MEMORY: 300, MEASURED_MEMORY: 120 + 2 * 4 * 18})  # legend + 2 marks
    assert "median step" in dom
