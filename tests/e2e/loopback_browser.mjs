// Headless Chromium (Debian's, driven by playwright-core) whose every request that leaves 127.0.0.1 is aborted
// and counted in summary.blocked_requests, with the step (stepOf()) it was made in.
import { chromium } from 'playwright-core';

export async function loopbackBrowser(summary, stepOf) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 } });
  await context.route('**/*', (route) => {
    const url = route.request().url();
    let host = null;
    try { host = new URL(url).hostname; } catch { /* not a URL with a host */ }
    if (host === '127.0.0.1') return route.continue();
    summary.blocked_requests.push({ step: stepOf(), url });
    return route.abort();
  });
  return { browser, context };
}

// A new page of `context` whose console errors and uncaught exceptions are kept in summary.console_errors, with the
// step (stepOf()) they came in.
export async function watchedPage(context, summary, stepOf) {
  const page = await context.newPage();
  page.on('console', (message) => { if (message.type() === 'error') summary.console_errors.push({ step: stepOf(), text: message.text() }); });
  page.on('pageerror', (error) => summary.console_errors.push({ step: stepOf(), text: String(error) }));
  return page;
}
