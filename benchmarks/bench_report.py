#!/usr/bin/env python3
"""The size of a run's report page, and how soon its case explorer is drawn in Chromium.

    python benchmarks/bench_report.py                     # 2,000 and 10,000 cases, 3 trials each
    python benchmarks/bench_report.py --sizes 500 --trials 1
    python benchmarks/bench_report.py --direct              # the notebook's cells drawn in-process (faster)

For each size: bench_run.py's synthetic suite (a fifth must be abstained on, a tenth are multi-hop) is
run with the bundled hub and the offline judge in this process (``--isolation none``, saved as a
record), then ``qaeval report RECORD --html PAGE`` renders the run notebook. Prints the page's size,
the case data's share of it, the time to render the page, and the time to first render: Chromium
(headless, through chromium-driver and Selenium) from navigation start to the explorer's list drawn
(``performance.now()`` when its script finished its first draw), the median of ``--repeat`` loads.

Targets (issue 52): a 10,000-case page under 15 MB, usable within 2 s.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_run import write_suite  # noqa: E402  (beside this script)

TARGET_MB_10K = 15.0
TARGET_S_10K = 2.0


def qaeval(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "qaeval", *args], check=True, capture_output=True)
    return time.perf_counter() - start


def first_render(page: Path, repeat: int) -> float:
    """Seconds from navigation start to the explorer's first draw, the median of ``repeat`` fresh loads."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "chromedriver"))
    try:
        times = []
        for _ in range(repeat):
            driver.get("about:blank")
            driver.get(page.as_uri())
            drawn = WebDriverWait(driver, 60).until(
                lambda d: d.find_element(By.CSS_SELECTOR, ".qaeval-explorer").get_attribute("data-drawn-ms")
            )
            times.append(float(drawn) / 1000)
        return statistics.median(times)
    finally:
        driver.quit()


def direct_page(record: Path, page: Path) -> None:
    """The run notebook's cells drawn in this process into one page (``render.page``), without papermill
    and nbconvert: the same markup, in a fraction of the time on a busy machine."""
    from qaeval import api
    from qaeval.reports import banner, case_explorer, drilldown, facts, scoreboard_table, slice_table
    from qaeval.reports.render import page as whole_page

    run = api.load_run(str(record))
    cells = [banner(run) + facts(run), scoreboard_table(run), case_explorer(run), drilldown(run, open_failing=True)]
    body = "".join(f'<div class="qaeval-output">{c.markup}</div>' for c in [*cells, slice_table(run)])
    page.write_text(whole_page("qaeval run report", body), "utf-8")


def measure(n: int, trials: int, repeat: int, tmp: Path, direct: bool = False) -> dict[str, float]:
    folder, record, page = tmp / f"suite-{n}", tmp / f"run-{n}.json", tmp / f"run-{n}.html"
    folder.mkdir()
    write_suite(folder, n)
    ran = qaeval(
        "run", "--data", str(folder), "--trials", str(trials), "--isolation", "none", "--save", str(record), "--quiet"
    )
    if direct:
        start = time.perf_counter()
        direct_page(record, page)
        rendered = time.perf_counter() - start
    else:
        rendered = qaeval("report", str(record), "--html", str(page))
    text = page.read_text("utf-8")
    data = sum(len(m) for m in re.findall(r"<script[^>]*qx-data[^>]*>(.*?)</script>", text, flags=re.S))
    return dict(
        mb=page.stat().st_size / 1e6,
        data_mb=data / 1e6,
        run_s=ran,
        render_s=rendered,
        first_render_s=first_render(page, repeat),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[2000, 10000])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="page loads per size (the median is printed)")
    parser.add_argument(
        "--direct", action="store_true", help="draw the run notebook's cells in this process, not through papermill"
    )
    args = parser.parse_args()
    print(f"{'cases':>7} {'page MB':>8} {'data MB':>8} {'run s':>7} {'render s':>9} {'first draw s':>13}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="qaeval-bench-report-") as tmp:
        for n in args.sizes:
            r = results[n] = measure(n, args.trials, args.repeat, Path(tmp), args.direct)
            print(
                f"{n:>7} {r['mb']:>8.2f} {r['data_mb']:>8.2f} {r['run_s']:>7.1f} {r['render_s']:>9.1f} "
                f"{r['first_render_s']:>13.2f}",
                flush=True,
            )
    if 10000 in results:
        r = results[10000]
        ok = r["mb"] < TARGET_MB_10K and r["first_render_s"] < TARGET_S_10K
        print(
            f"target (10,000 cases): page under {TARGET_MB_10K:g} MB ({r['mb']:.2f}), first draw under "
            f"{TARGET_S_10K:g} s ({r['first_render_s']:.2f}): {'met' if ok else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
