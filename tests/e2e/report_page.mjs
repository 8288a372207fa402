// Opens a report in headless Chromium (Debian's, driven by playwright-core), with the network
// blocked, and prints what a person would see: console errors, charts, their data, a screenshot of the first
// screen (1280×800), and where the first screen's parts lie (getBoundingClientRect, px from the top of the page,
// and whether each is drawn at all):
// the summary, the regression line, the full verdict table (collapsed, then after a click on its summary), the
// comparison table's header, the first chart, and how many lines each verdict cell of the comparison takes.
// usage: node report_page.mjs REPORT.html SCREENSHOT.png
import { chromium } from 'playwright-core';

const [page_path, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
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
  const layout = () => page.evaluate(() => {
    const box = (selector) => {
      const element = document.querySelector(selector);
      if (!element) return null;
      const { top, bottom, height, width } = element.getBoundingClientRect();
      // a closed <details>' content keeps a layout box in Chromium (content-visibility: hidden): ask if it is drawn
      return { top, bottom, height, width, visible: element.checkVisibility() };
    };
    const verdictLines = [...document.querySelectorAll('tr.config > td:last-child')].map((td) => {
      const range = document.createRange();
      range.selectNodeContents(td);
      return Math.round(range.getBoundingClientRect().height / parseFloat(getComputedStyle(td).lineHeight));
    });
    return {
      viewport: { width: innerWidth, height: innerHeight },
      summary: box('#summary'), regression_line: box('#regressions'),
      all_verdicts: box('details.all-verdicts'), all_verdicts_table: box('details.all-verdicts table'),
      comparison: box('#comparison'), comparison_header: box('#comparison ~ table tr'), first_chart: box('svg.chart'),
      verdict_lines: verdictLines,
    };
  });
  const first_screen = await layout();
  let opened = null;
  if (await page.$('details.all-verdicts summary')) {
    await page.click('details.all-verdicts summary');
    opened = await layout();
  }
  process.stdout.write(JSON.stringify({ errors, requests, charts, headings, first_screen, opened }) + '\n');
} finally {
  await browser.close();
}
