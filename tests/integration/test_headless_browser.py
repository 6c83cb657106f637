"""The browser harness of the report test: a page that never finishes loading fails it with
each browser's own account, after fresh browsers were tried, instead of a bare timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.headless_browser import ChromiumHung, chromium_binary, load_page
from tests.requirements import needs

pytestmark = [pytest.mark.integration,
              needs(chromium_binary() is not None,
                    reason="Chromium is not installed (`apt-get install chromium`; .ci/run does)")]


def test_a_page_that_hangs_every_browser_fails_with_what_each_saw(tmp_path: Path) -> None:
    page = tmp_path / "hang.html"
    page.write_text("<html><head><title>hang</title></head>"
                    "<body><script>while (true) {}</script></body></html>")
    started = time.monotonic()
    with pytest.raises(ChromiumHung) as hung:
        load_page(page, timeout=6, attempts=2)
    message = str(hung.value)
    assert message.startswith("2 browsers hung:")
    assert message.count("no answer from Chromium after") == 2
    assert message.count("events seen: ['Target.attachedToTarget'") == 2
    assert message.count("chromium's log ends:") == 2
    assert time.monotonic() - started < 60

