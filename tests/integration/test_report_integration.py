"""`servetune report DIR` on a real stored experiment (the shared stand-in run), then
report.html in headless Chromium: no console errors, every plot decoded, and a screenshot
that shows the plots. Set SERVETUNE_SCREENSHOT to keep the screenshot at that path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.integration.conftest import CONFIRM_CAP, Run
from tests.integration.headless_browser import chromium_binary, load_page
from tests.requirements import needs

# the shared confirm run takes ~100 s on a quiet box and minutes on a loaded one
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PLOTS = ("objective", "confirm", "knobs", "parallel", "time_split", "pareto", "startup")


@pytest.fixture(scope="module")
def reported(confirmed_run: Run) -> Run:
    exp = confirmed_run.exp
    for name in ("report.html", "best/report.md", *(f"plots/{p}.png" for p in PLOTS)):
        (exp.out / name).unlink(missing_ok=True)  # the run wrote them: make the command do it
    result = exp.run(["report", str(exp.out)], timeout=120)
    assert result.returncode == 0, result
    return Run(exp, result)


def test_report_writes_the_html_and_every_plot(reported: Run) -> None:
    out, printed = reported.exp.out, reported.result.stdout
    assert f"wrote {out / 'report.html'}" in printed
    assert "decision: top " in printed
    assert f"confirm (fresh launches, alternating, at most {CONFIRM_CAP} each" in printed
    for name in PLOTS:
        path = out / "plots" / f"{name}.png"
        with Image.open(path) as im:
            im.load()
            assert im.format == "PNG" and im.mode in ("RGBA", "RGB")
            assert 500 <= im.width <= 3000 and 250 <= im.height <= 3000, (name, im.size)
            assert np.asarray(im.convert("L")).std() > 10, f"{name} looks blank"
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == len(PLOTS)
    md = (out / "best" / "report.md").read_text()
    for heading in ("## Decision", "### Evidence: the confirm stage",
                    "### Is speculative decoding worth it here?", "## What was searched",
                    "## How", "## Failures by kind"):
        assert heading in md


@needs(chromium_binary() is not None,
       reason="Chromium is not installed (`apt-get install chromium`; .ci/run does)")
def test_report_loads_in_headless_chromium(reported: Run, tmp_path: Path) -> None:
    page = load_page(reported.exp.out / "report.html")
    assert page.errors == [], page.errors
    assert page.title.startswith("servetune report")
    assert len(page.images) == len(PLOTS)
    for image in page.images:
        assert image["complete"] and image["naturalWidth"] >= 500, image
        assert image["naturalHeight"] >= 250 and image["width"] > 0, image
    shot = tmp_path / "report.png"
    shot.write_bytes(page.screenshot)
    keep = os.environ.get("SERVETUNE_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
    with Image.open(shot) as im:
        rgb = im.convert("RGB")
        assert rgb.width == 1280 and rgb.height == page.height > 2000
        assert np.asarray(rgb.convert("L")).std() > 20, "the screenshot is blank"
        pixels = np.asarray(rgb.resize((rgb.width // 4, rgb.height // 4))).astype(int)
        colored = int(((pixels.max(axis=2) - pixels.min(axis=2)) > 60).sum())
        # Plot markers, bars and lines are coloured; text and tables are not.
        assert colored > 2000, f"only {colored} coloured pixels: the plots are not showing"
