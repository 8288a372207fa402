// Drives the web console in headless Chromium (Debian's, driven by playwright-core) against a running
// `brokerbench serve`, as a person would: a spec the API rejects, two tiny runs watched to the end, a
// report with its charts, a comparison of the two runs, the schedules. Every request that leaves
// 127.0.0.1 is aborted and counted. A screenshot is saved at each step; the last line printed is a JSON
// summary for the test to judge.
// usage: node console.mjs BASE_URL SCREENSHOT_DIR   (env RUN_TIMEOUT_S, default 180)
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { loopbackBrowser } from './loopback_browser.mjs';

const [base, shots] = process.argv.slice(2);
const runTimeoutMs = Number(process.env.RUN_TIMEOUT_S ?? 180) * 1000;
const origin = new URL(base).origin;
mkdirSync(shots, { recursive: true });

// The tiniest real run: one broker, one format, one size, one rate, one measured second.
const TINY_SPEC = {
  name: 'console-e2e',
  brokers: ['redis-streams'],
  sizes: [1024],
  rates: [200],
  formats: ['raw'],
  duration_s: 10, // three blocks of at least 3 s each: enough for the comparison to judge, not only list
  warmup_s: 0.5,
  warmup_until_steady: false,
};
const INVALID_SPEC = { ...TINY_SPEC, sizes: [10] }; // below the schema's minimum of 64 bytes
const ACTIVE = ['starting', 'running', 'cancelling'];

const summary = {
  base, steps: [], screenshots: [], blocked_requests: [], console_errors: [], expected_errors: [],
  json_error: null, field_error: null, runs: [], report: null, compare: null, schedules: null,
  idempotency_keys: [], busy_retries: 0,
};
let step = 'open';
let expectStatuses = []; // HTTP error statuses the current step provokes on purpose

const { browser, context } = await loopbackBrowser(summary, () => step);
try {
  const page = await context.newPage();
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    const text = message.text();
    const status = /status of (\d{3})/.exec(text);
    const expected = status && expectStatuses.includes(Number(status[1]));
    (expected ? summary.expected_errors : summary.console_errors).push({ step, text });
  });
  page.on('pageerror', (error) => summary.console_errors.push({ step, text: String(error) }));
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname.endsWith('/runs')) {
      summary.idempotency_keys.push({ step, key: request.headers()['idempotency-key'] ?? null });
    }
  });

  let shotNumber = 0;
  async function shot(name, target = page) {
    shotNumber += 1;
    const path = join(shots, `${String(shotNumber).padStart(2, '0')}-${name}.png`);
    await target.screenshot(target === page ? { path, fullPage: true } : { path });
    summary.screenshots.push(path);
  }

  async function begin(name) {
    step = name;
    expectStatuses = [];
    summary.steps.push(name);
  }

  async function openNewRunForm() {
    await page.click('nav a[href="#/new"]');
    await page.waitForSelector('#new-run');
    await page.waitForSelector('#suite option[value="smoke"]', { state: 'attached' });
    await page.check('input[name=source][value=spec]');
    await page.waitForSelector('#spec', { state: 'visible' });
  }

  // Starts a run from the pasted tiny spec; a 409 (the stack still busy with the last run) is
  // shown by the page, and answered as a person would: wait, then start again.
  async function startTinyRun() {
    await openNewRunForm();
    await page.fill('#spec', JSON.stringify(TINY_SPEC, null, 2));
    expectStatuses = [409];
    const deadline = Date.now() + 60_000;
    for (;;) {
      await page.click('#start-run');
      const outcome = await Promise.race([
        page.waitForURL(/#\/runs\/\d{8}T\d{6}Z-[0-9a-f]{6}$/, { timeout: 30_000 }).then(() => 'started'),
        page.waitForSelector('#busy', { timeout: 30_000 }).then(() => 'busy'),
        page.waitForSelector('#start-outcome .error-box', { timeout: 30_000 }).then(() => 'error'),
      ]);
      if (outcome === 'started') break;
      const text = await page.textContent('#start-outcome');
      if (outcome === 'error' || Date.now() > deadline) throw new Error(`the run did not start: ${text}`);
      summary.busy_retries += 1;
      await page.waitForTimeout(2000);
    }
    expectStatuses = [];
    return decodeURIComponent(page.url().split('#/runs/')[1]);
  }

  // Watches the run page until the run ends; what the page showed on the way is kept.
  async function watchRun(runId, name) {
    const started = Date.now();
    const seen = [];
    let shotWhileRunning = false;
    await page.waitForSelector('#run-status .badge');
    for (;;) {
      const view = await page.evaluate(() => ({
        status: document.querySelector('#run-status .badge')?.textContent.trim().replaceAll(' ', '_'),
        progress: document.querySelector('#run-progress [role=progressbar]')?.getAttribute('aria-valuetext'),
        cells: document.querySelectorAll('#cells-table tbody tr').length,
        cancel: !document.querySelector('#cancel-run')?.hidden,
      }));
      const last = seen[seen.length - 1];
      if (!last || last.status !== view.status || last.progress !== view.progress) {
        seen.push({ ...view, at_s: Math.round((Date.now() - started) / 100) / 10 });
      }
      if (!shotWhileRunning && ACTIVE.includes(view.status)) {
        await shot(`${name}-in-progress`);
        shotWhileRunning = true;
      }
      if (view.status && !ACTIVE.includes(view.status)) break;
      if (Date.now() - started > runTimeoutMs) throw new Error(`run ${runId} still ${view.status} after ${runTimeoutMs / 1000} s`);
      await page.waitForTimeout(250);
    }
    const final = await page.evaluate(() => ({
      cells: [...document.querySelectorAll('#cells-table tbody tr')].map((tr) => ({
        cell_id: tr.dataset.cellId, status: tr.dataset.status, throughput: tr.children[6].textContent,
        verdict: tr.children[7].textContent,
      })),
      reason: document.querySelector('#run-reason')?.textContent ?? null,
      timings: document.querySelector('#run-timings')?.textContent ?? null,
    }));
    const run = {
      run_id: runId, status: seen[seen.length - 1].status, seconds: (Date.now() - started) / 1000,
      seen, ...final,
    };
    summary.runs.push(run);
    await shot(`${name}-finished`);
    return run;
  }

  // -- 1. the console opens on the runs list
  await begin('open');
  await page.goto(`${base}/`, { waitUntil: 'load' });
  await page.waitForSelector('#runs tbody tr');
  await page.waitForFunction(() => document.getElementById('health').textContent.includes('·'));
  summary.health = await page.textContent('#health');
  await shot('runs-list');

  // -- 2. a spec that is not JSON is caught in the page, nothing is sent
  await begin('json-error');
  await openNewRunForm();
  const postsBefore = summary.idempotency_keys.length;
  await page.fill('#spec', '{"brokers": ["redis-streams"], "sizes": [1024],,}');
  await page.click('#start-run');
  await page.waitForSelector('#spec-errors .problem');
  summary.json_error = {
    text: await page.textContent('#spec-errors'),
    invalid: await page.getAttribute('#spec', 'aria-invalid'),
    sent: summary.idempotency_keys.length - postsBefore,
  };
  await shot('json-error');

  // -- 3. a spec the API rejects: the problem is shown at its field
  await begin('field-error');
  expectStatuses = [422];
  await page.fill('#spec', JSON.stringify(INVALID_SPEC, null, 2));
  await page.click('#start-run');
  await page.waitForSelector('#spec-errors .problem[data-field="sizes[0]"]');
  summary.field_error = await page.evaluate(() => {
    const spec = document.getElementById('spec');
    const errors = document.getElementById('spec-errors');
    const problems = [...errors.querySelectorAll('.problem')].map((li) => ({
      field: li.dataset.field, path: li.querySelector('.field-path').textContent, text: li.textContent,
    }));
    return {
      problems,
      invalid: spec.getAttribute('aria-invalid'),
      described_by: spec.getAttribute('aria-describedby'),
      // "at the field": the list follows the textarea directly
      next_to_field: spec.nextElementSibling === errors,
      outcome: document.getElementById('start-outcome').textContent,
    };
  });
  await page.click('#spec-errors .problem[data-field="sizes[0]"]');
  summary.field_error.selected = await page.evaluate(() => {
    const spec = document.getElementById('spec');
    return spec.value.slice(spec.selectionStart, spec.selectionEnd);
  });
  await shot('field-error');
  expectStatuses = [];

  // -- 3b. one run of a study, at a scale the API refuses: the problem is shown at the suite, nothing starts
  await begin('study-scale-error');
  expectStatuses = [422];
  await page.check('input[name=source][value=suite]');
  await page.selectOption('#suite', 'vandongen/vandongen-startup-burst');
  await page.fill('#scale', '7');
  await page.click('#start-run');
  await page.waitForSelector('#suite-errors .problem[data-field="scale"]');
  summary.study_scale_error = {
    text: await page.textContent('#suite-errors'),
    info: await page.textContent('#suite-info'),
  };
  await shot('study-scale-error');
  await page.fill('#scale', '');
  expectStatuses = [];

  // -- 4. a tiny run, watched to its end
  await begin('first-run');
  const first = await startTinyRun();
  await watchRun(first, 'first-run');

  // -- 5. its report, with charts
  await begin('report');
  await page.waitForSelector('#report-frame');
  const frame = page.frameLocator('#report-frame');
  await frame.locator('svg.chart').first().waitFor({ timeout: 30_000 });
  summary.report = {
    charts: await frame.locator('svg.chart').count(),
    titles: await frame.locator('svg.chart').evaluateAll((svgs) => svgs.slice(0, 10).map((s) => s.getAttribute('aria-label'))),
    heading: await frame.locator('h1').first().textContent(),
    links: await page.$$eval('.report-links a', (as) => as.map((a) => a.getAttribute('href'))),
  };
  await page.locator('#report-frame').scrollIntoViewIfNeeded();
  await shot('report', page.locator('#report-frame'));
  await frame.locator('svg.chart').first().scrollIntoViewIfNeeded();
  await shot('report-chart', frame.locator('svg.chart').first());

  // -- 6. a second tiny run
  await begin('second-run');
  const second = await startTinyRun();
  await watchRun(second, 'second-run');

  // -- 7. both in the list; the two selected and compared
  await begin('compare');
  await page.click('nav a[href="#/runs"]');
  await page.waitForSelector(`#runs tr[data-run-id="${second}"]`);
  await shot('runs-after');
  await page.check(`#runs input[data-run-id="${first}"]`);
  await page.check(`#runs input[data-run-id="${second}"]`);
  await page.click('#compare-selected');
  await page.waitForSelector('#compare-table, #compare-empty, #compare-result .error-box', { timeout: 60_000 });
  summary.compare = await page.evaluate(() => ({
    url: location.hash,
    rows: [...document.querySelectorAll('#compare-table tbody tr')].map((tr) => ({
      verdict: tr.dataset.verdict, cells: [...tr.children].map((td) => td.textContent),
    })),
    summary: document.getElementById('compare-summary')?.textContent ?? null,
    error: document.querySelector('#compare-result .error-box')?.textContent ?? null,
  }));
  summary.compare.baseline = first;
  summary.compare.candidate = second;
  await shot('compare');

  // -- 8. the schedules
  await begin('schedules');
  await page.click('nav a[href="#/schedules"]');
  await page.waitForSelector('#schedules-table, #no-schedules, main .error-box');
  summary.schedules = await page.evaluate(() => ({
    rows: document.querySelectorAll('#schedules-table tbody tr').length,
    baselines: [...document.querySelectorAll('#schedules-table tbody tr')]
      .map((tr) => [tr.dataset.schedule, tr.querySelector('td:nth-child(3) .hint')?.textContent ?? null]),
    error: document.querySelector('main .error-box')?.textContent ?? null,
  }));
  await shot('schedules');
  summary.ok = true;
} catch (error) {
  summary.ok = false;
  summary.error = `${step}: ${error.stack || error}`;
  const path = join(shots, 'failure.png');
  try {
    await browser.contexts()[0]?.pages()[0]?.screenshot({ path, fullPage: true });
    summary.screenshots.push(path);
  } catch { /* the browser itself failed */ }
} finally {
  await browser.close();
}
process.stdout.write(`${JSON.stringify(summary)}\n`);
