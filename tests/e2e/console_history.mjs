// A suite's history in the web console (headless Chromium, driven by playwright-core), against a running
// `brokerbench serve` whose store holds the suite's runs: the history page is opened from the navigation, the
// suite and a metric chosen as a person would, each configuration's series read off its chart (the points, the
// runs marked on either side of a change, the change line), and the run a change began with followed to its run
// page. Every request that leaves 127.0.0.1 is aborted and counted; the last line printed is a JSON summary.
// usage: node console_history.mjs BASE_URL SCREENSHOT_DIR SUITE METRIC
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { loopbackBrowser, watchedPage } from './loopback_browser.mjs';

const [base, shots, suite, metric] = process.argv.slice(2);
const origin = new URL(base).origin;
mkdirSync(shots, { recursive: true });
const summary = { base, screenshots: [], blocked_requests: [], console_errors: [], series: [], followed: null };
let step = 'open';

const { browser, context } = await loopbackBrowser(summary, () => step);
try {
  const page = await watchedPage(context, summary, () => step);
  const shot = async (name) => {
    const path = join(shots, `history-${name}.png`);
    await page.screenshot({ path, fullPage: true });
    summary.screenshots.push(path);
  };

  await page.goto(`${origin}${new URL(base).pathname}`);
  step = 'history';
  await page.click('nav a[href="#/history"]');
  await page.waitForSelector('#history-form');
  await page.fill('#history-suite', suite);
  await page.selectOption('#history-metric', metric);
  await page.click('#history-form button[type=submit]');
  await page.waitForSelector('#history figure.series, #history .error-box', { timeout: 60_000 });
  summary.url = await page.evaluate(() => location.hash);
  summary.heading = await page.textContent('main h1');
  summary.summary = await page.textContent('#history-summary').catch(() => null);
  summary.error = await page.evaluate(() => document.querySelector('#history .error-box')?.textContent ?? null);
  summary.series = await page.evaluate(() => [...document.querySelectorAll('#history figure.series')].map((f) => ({
    key: f.dataset.key,
    caption: f.querySelector('figcaption').textContent,
    points: [...f.querySelectorAll('svg a.run-point')].map((a) => {
      const c = a.querySelector('circle');
      return { href: a.getAttribute('href'), run: c.dataset.run, kind: c.getAttribute('class'),
        x: Number(c.getAttribute('cx')), y: Number(c.getAttribute('cy')) };
    }),
    marks: [...f.querySelectorAll('svg g.change-point')].map((g) => ({
      began: g.dataset.began, before: g.dataset.before, alert: g.classList.contains('alert'),
      x: Number(g.querySelector('line').getAttribute('x1')), label: g.querySelector('text').textContent,
    })),
    listed: [...f.querySelectorAll('ul.change-points li')].map((li) => ({
      text: li.textContent, links: [...li.querySelectorAll('a')].map((a) => a.getAttribute('href')),
    })),
  })));
  await shot('series');

  step = 'follow';
  const began = summary.series.flatMap((s) => s.marks)[0]?.began;
  if (began) {
    await page.click(`#history ul.change-points a[href="#/runs/${encodeURIComponent(began)}"] >> nth=0`);
    await page.waitForSelector('#run-status .badge');
    summary.followed = { hash: await page.evaluate(() => location.hash), heading: await page.textContent('main h1'),
      suite_link: await page.getAttribute('#run-suite-history', 'href') };
    await shot('run');
  }
  summary.ok = true;
} catch (error) {
  summary.ok = false;
  summary.error = `${step}: ${error.stack || error}`;
} finally {
  await browser.close();
}
process.stdout.write(`${JSON.stringify(summary)}\n`);
