// A stored run's page in the web console (headless Chromium, driven by playwright-core), against a running
// `brokerbench serve`: the cells table read as a person sees it, each row's format (a cell not stamped at the
// kernel's arrival carries †) and the note under the table. Every request that leaves 127.0.0.1 is aborted and
// counted; the last line printed is a JSON summary.
// usage: node console_stamps.mjs BASE_URL SCREENSHOT_DIR RUN_ID
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { loopbackBrowser, watchedPage } from './loopback_browser.mjs';

const [base, shots, runId] = process.argv.slice(2);
const origin = new URL(base).origin;
mkdirSync(shots, { recursive: true });
const summary = { base, screenshots: [], blocked_requests: [], console_errors: [], rows: [], note: null };
let step = 'open';

const { browser, context } = await loopbackBrowser(summary, () => step);
try {
  const page = await watchedPage(context, summary, () => step);
  await page.goto(`${origin}${new URL(base).pathname}#/runs/${encodeURIComponent(runId)}`);
  step = 'cells';
  await page.waitForSelector('#cells-table tbody tr', { timeout: 60_000 });
  summary.rows = await page.evaluate(() => [...document.querySelectorAll('#cells-table tbody tr')].map((tr) => ({
    cell_id: tr.dataset.cellId, broker: tr.children[1].textContent, format: tr.children[2].textContent,
  })));
  summary.note = await page.evaluate(() => document.querySelector('#stamps-legend')?.textContent ?? null);
  const path = join(shots, 'run-stamps.png');
  await page.screenshot({ path, fullPage: true });
  summary.screenshots.push(path);
  summary.ok = true;
} catch (error) {
  summary.ok = false;
  summary.error = `${step}: ${error.stack || error}`;
} finally {
  await browser.close();
}
process.stdout.write(`${JSON.stringify(summary)}\n`);
