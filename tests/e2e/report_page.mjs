// Opens a report in headless Chromium (Debian's, driven by playwright-core), with the network
// blocked, and prints what a person would see: console errors, charts, their data, a screenshot.
// usage: node report_page.mjs REPORT.html SCREENSHOT.png
import { chromium } from 'playwright-core';

const [page_path, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const requests = [];
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith('file:')) return route.continue();
    requests.push(url);
    return route.abort();
  });
  const page = await context.newPage();
  const errors = [];
  page.on('console', (message) => { if (message.type() === 'error') errors.push(message.text()); });
  page.on('pageerror', (error) => errors.push(String(error)));
  await page.goto(`file://${page_path}`, { waitUntil: 'load' });
  const charts = await page.$$eval('svg.chart', (svgs) => svgs.map((svg) => ({
    title: svg.getAttribute('aria-label'),
    series: svg.querySelectorAll('polyline.series').length,
    points: svg.querySelectorAll('circle').length,
    bars: svg.querySelectorAll('rect.bar').length,
    width: svg.getBoundingClientRect().width,
  })));
  const headings = await page.$$eval('h2', (hs) => hs.map((h) => h.textContent));
  await page.screenshot({ path: screenshot, fullPage: false });
  process.stdout.write(JSON.stringify({ errors, requests, charts, headings }) + '\n');
} finally {
  await browser.close();
}
