"""Take the dashboard screenshots in this folder from a running ``pgbus-demo``.

    pgbus-demo --port 5099 &      # let its traffic run a few minutes, so insights have something to show
    python docs/screenshots/take.py http://127.0.0.1:5099
    python docs/screenshots/take.py http://127.0.0.1:5099 run-ar.png attention-ar.png   # only these

Drives Debian's Chromium (/usr/bin/chromium) through Playwright; nothing is downloaded. A path with
``{run}`` is the page of the demo's order paused on a failed fan-out (the run of run-light.png).
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent

SHOTS = [
    # (file, path, color scheme, width)
    ("insights-light.png", "/pgbus/classes/OrderWorkflow/insights?window=1h&locale=en", "light", 1280),
    ("insights-dark.png", "/pgbus/classes/OrderWorkflow/insights?window=1h&locale=en", "dark", 1280),
    ("insights-de.png", "/pgbus/classes/OrderWorkflow/insights?window=1h&locale=de", "light", 1280),
    ("runs-live.png", "/pgbus/runs?locale=en", "light", 1280),
    # Right to left: the page mirrored, the timeline's time still left to right (docs/decisions.md).
    ("run-ar.png", "/pgbus/runs/{run}?locale=ar", "light", 1280),
    ("attention-ar.png", "/pgbus/attention?locale=ar", "light", 1280),
]
#: The runs list whose first run is ``{run}``.
RUN_LIST = "/pgbus/runs?workflow_class=OrderWorkflow&reason=paused_error&step=notify_vendors&locale=en"


def main(base: str, only: list[str]) -> int:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for name, path, scheme, width in SHOTS:
            if only and name not in only:
                continue
            context = browser.new_context(color_scheme=scheme, viewport={"width": width, "height": 900})  # type: ignore[arg-type]
            page = context.new_page()
            if "{run}" in path:
                page.goto(base + RUN_LIST)
                run = page.get_by_test_id("run-row").first.get_attribute("data-workflow-id")
                path = path.replace("{run}", str(run))
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(HERE / name), full_page=True)
            context.close()
            print(f"wrote {name}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:5000", sys.argv[2:]))
