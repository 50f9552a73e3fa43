"""Take the dashboard screenshots in this folder from a running ``pgbus-demo``.

    pgbus-demo --port 5099 &      # let its traffic run a few minutes, so insights have something to show
    python docs/screenshots/take.py http://127.0.0.1:5099

Drives Debian's Chromium (/usr/bin/chromium) through Playwright; nothing is downloaded.
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
]


def main(base: str) -> int:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for name, path, scheme, width in SHOTS:
            context = browser.new_context(color_scheme=scheme, viewport={"width": width, "height": 900})  # type: ignore[arg-type]
            page = context.new_page()
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(HERE / name), full_page=True)
            context.close()
            print(f"wrote {name}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:5000"))
