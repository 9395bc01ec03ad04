"""L2: the HTML report in headless Chromium: the bar chart is drawn, transcripts expand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEMO_FILES, DEMO_SCRIPT
from servers import CHROMIUM_INSTALL, program

from skilldeck.evals import load_suite, run_suite, write_reports

pytestmark = [pytest.mark.L2, pytest.mark.browser]

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A real report: the built-in litigation-intake cases on the demo's scripted model."""
    folder = tmp_path_factory.mktemp("html")
    suite_file = folder / "suite.yaml"
    suite_file.write_text(
        yaml.safe_dump({"skills": ["litigation-intake"], "fixtures": [str(DEMO_FILES)]}), "utf-8"
    )
    report = run_suite(load_suite(suite_file), out=folder / "out", model=f"scripted:{DEMO_SCRIPT}")
    return write_reports(report, folder / "out")["html"], report


def test_the_report_page_draws_buckets_and_expands_transcripts(
    report_html: tuple[Path, dict[str, Any]],
) -> None:
    from playwright.sync_api import sync_playwright

    chromium = program("chromium", CHROMIUM_INSTALL)
    path, report = report_html
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = browser.new_page()
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            assert requests == [path.as_uri()]  # self-contained: nothing else is fetched

            chart = page.locator("svg#bucket-chart")
            assert chart.is_visible()
            bars = chart.locator("rect.bar")
            assert bars.count() == 2 * len(report["buckets"])  # mean score and pass rate
            for key, bucket in report["buckets"].items():
                bar = chart.locator(f'rect.bar.mean_score[data-bucket="{key}"]')
                box = bar.bounding_box()
                assert box is not None
                assert box["width"] == pytest.approx(420 * bucket["mean_score"], abs=1)

            task = next(t for t in report["tasks"] if t["id"] == "intake_complete_after_answers")
            trial = page.locator(f"#trial-{task['trials'][0]['trial_id']}")
            details = trial.locator("details.transcript")
            entries = details.locator(".entry")
            assert details.evaluate("d => d.open") is False
            assert not entries.first.is_visible()
            details.locator("summary").click()
            assert details.evaluate("d => d.open") is True
            assert entries.first.is_visible()
            assert entries.count() >= 6
            assert "file__parse" in details.inner_text()
            assert "Acme Logistics Ltd." in details.inner_text()  # the card answers resumed it
        finally:
            browser.close()
