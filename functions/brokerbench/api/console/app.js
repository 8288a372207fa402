// The brokerbench web console: one page over the HTTP API (hash routes, plain DOM, nothing fetched
// from anywhere but the API). Every URL is relative, so the page works behind an API Gateway stage
// prefix; hosted elsewhere (S3), window.BROKERBENCH_API or <meta name="brokerbench-api"> names the API.
'use strict';

(() => {
  const API_BASE = String(window.BROKERBENCH_API
    ?? document.querySelector('meta[name="brokerbench-api"]')?.getAttribute('content') ?? '').trim();
  const ACTIVE = new Set(['starting', 'running', 'cancelling']);
  const STATUSES = ['starting', 'running', 'completed', 'completed_with_failures', 'failed', 'cancelled',
    'interrupted', 'incomplete'];
  const VERDICT_ORDER = { regression: 0, unstable: 1, improvement: 2, unchanged: 3 };
  const RUN_POLL_MS = 1000;
  const LIST_POLL_MS = 2000;
  const LIST_IDLE_POLL_MS = 5000; // a run just started may not be listed yet
  const PAGE_SIZE = 25;
  const EXAMPLE_SPEC = {
    name: 'adhoc',
    brokers: ['redis-streams'],
    sizes: [1024],
    rates: [200],
    formats: ['raw'],
    duration_s: 1,
    warmup_s: 0.5,
  };

  // -- the API ---------------------------------------------------------------------------------
  function apiUrl(path) {
    return API_BASE ? `${API_BASE.replace(/\/+$/, '')}/${path}` : path;
  }

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.message) || `HTTP ${status}`);
      this.status = status;
      this.field = (body && body.field) || null;
      this.problems = (body && Array.isArray(body.problems)) ? body.problems : [];
    }

    // A retry can help: the request may not have reached the API, or the API failed on its side.
    get retryable() { return this.status === 0 || this.status >= 500; }
  }

  async function api(path, { method = 'GET', body, headers = {}, signal } = {}) {
    const init = { method, signal, headers: { Accept: 'application/json', ...headers } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(apiUrl(path), init);
    } catch (error) {
      if (error.name === 'AbortError') throw error;
      throw new ApiError(0, { message: `the API could not be reached (${error.message})` });
    }
    const text = await response.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch { data = { message: text.slice(0, 300) }; }
    }
    if (!response.ok) throw new ApiError(response.status, data || { message: response.statusText });
    return data;
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
    const s = q.toString();
    return s ? `?${s}` : '';
  }

  const enc = encodeURIComponent;

  // -- DOM and formatting ---------------------------------------------------------------------
  // h('a', {href: '#/x', class: 'y'}, 'text', child): children are nodes or text, never HTML.
  function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  // replaceChildren that takes nested lists like h() does.
  function fill(el, ...children) {
    el.replaceChildren();
    return append(el, children);
  }

  const numberFormats = new Map();
  function fmtNumber(value, digits = 0) {
    if (value === null || value === undefined || Number.isNaN(value)) return '–';
    if (!numberFormats.has(digits)) {
      numberFormats.set(digits, new Intl.NumberFormat(undefined,
        { minimumFractionDigits: digits, maximumFractionDigits: digits }));
    }
    return numberFormats.get(digits).format(value);
  }

  function fmtRate(value) {
    if (value === null || value === undefined) return '–';
    return typeof value === 'number' ? `${fmtNumber(value, value < 100 ? 1 : 0)} msgs/s` : String(value);
  }

  function fmtBytes(value) {
    if (value === null || value === undefined) return '–';
    if (value >= 1048576 && value % 1048576 === 0) return `${fmtNumber(value / 1048576)} MiB`;
    if (value >= 1024 && value % 1024 === 0) return `${fmtNumber(value / 1024)} KiB`;
    return `${fmtNumber(value)} B`;
  }

  function fmtDuration(seconds) {
    if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return '–';
    if (seconds < 60) return `${fmtNumber(seconds, seconds < 10 ? 1 : 0)} s`;
    const s = Math.round(seconds);
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  }

  const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  function fmtTime(iso) {
    if (!iso) return h('span', { class: 'muted' }, '–');
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return h('time', { datetime: iso, title: iso }, dateFormat.format(date));
  }

  function fmtPercent(fraction) {
    if (fraction === null || fraction === undefined) return '–';
    const sign = fraction > 0 ? '+' : '';
    return `${sign}${fmtNumber(fraction * 100, 1)} %`;
  }

  // A metric's value with its unit, from the metric's name (…_us, …_msgs_per_s, …_bytes); `scale` is the
  // value that picks the unit, so the two sides of a comparison are stated in the same one.
  function fmtMetric(metric, value, scale = value) {
    if (value === null || value === undefined) return '–';
    if (metric.endsWith('_us')) return scale >= 10000 ? `${fmtNumber(value / 1000, 1)} ms` : `${fmtNumber(value)} µs`;
    if (metric.includes('msgs_per_s')) return fmtRate(value);
    if (metric.endsWith('_bytes')) return fmtBytes(value);
    return fmtNumber(value, 2);
  }

  // A compared figure, in fmtMetric's unit, with at least 4 significant digits: a change printed to 0.1 % can be
  // recomputed from two of them.
  function fmtFigure(metric, value, scale = value) {
    if (value === null || value === undefined) return '–';
    const digits = (x) => new Intl.NumberFormat(undefined, {
      maximumSignificantDigits: Math.min(21, Math.max(4, Math.floor(Math.log10(Math.abs(x) || 1)) + 1)),
    }).format(x);
    if (metric.endsWith('_us')) return scale >= 10000 ? `${digits(value / 1000)} ms` : `${digits(value)} µs`;
    if (metric.includes('msgs_per_s')) return `${digits(value)} msgs/s`;
    return digits(value);
  }

  function label(text) { return String(text).replaceAll('_', ' '); }

  // Every metric the project shows, as declared (GET /metrics: brokerbench.metrics), read once; a view that names
  // metrics waits for it.
  const METRICS = {};
  let metricsLoaded = null;
  function loadMetrics() {
    metricsLoaded = metricsLoaded || api('metrics').then((data) => {
      (data.metrics || []).forEach((m) => { METRICS[m.key] = m; });
    }).catch((error) => { metricsLoaded = null; throw error; });
    return metricsLoaded;
  }
  function metricName(metric) {
    return METRICS[metric]?.label || label(String(metric).replace(/_(us|msgs_per_s|bytes)$/, ''));
  }

  function fmtP(p) {
    if (p === null || p === undefined) return '–';
    return p < 0.001 ? p.toExponential(1) : String(Number(p.toPrecision(2)));
  }

  function statusBadge(status) {
    return h('span', { class: `badge status-${status}` }, label(status || 'unknown'));
  }

  function verdictBadge(verdict) {
    if (!verdict) return h('span', { class: 'muted' }, '–');
    return h('span', { class: `badge verdict-${verdict}` }, label(verdict));
  }

  // A cell whose rate the load generator set, not the broker (results' `limit`, brokerbench.limit).
  const CLIENT_BOUND = 'the load generator, not the broker, set this rate (its producers seldom waited for room in '
    + 'their in-flight windows, or a producer\'s core was saturated): a lower bound of what the broker could take, '
    + 'compared with no other broker';
  function limitBadge(limit) {
    if (!limit || limit.by !== 'client') return null;
    return h('span', { class: 'badge limit-client', title: CLIENT_BOUND }, 'client-bound');
  }
  // A cell whose consumers fell behind (results' `limit.consumers`, brokerbench.limit.consumer_limit).
  const CONSUMER_BOUND = 'the consumers, not the broker, fell behind: the backlog grew while they seldom waited for '
    + 'messages (or a consumer\'s core was saturated); end-to-end latency and the received rate are theirs';
  function consumerBadge(limit) {
    if (!limit || !limit.consumers || limit.consumers.by !== 'consumer') return null;
    return h('span', { class: 'badge limit-client', title: CONSUMER_BOUND }, 'consumer-bound');
  }

  // A cell measured on a busy host (results' `host`, brokerbench.host): its figures are no evidence.
  const HOST_BUSY = 'the host was busy while this cell measured (the kernel\'s CPU pressure with other processes '
    + 'using the CPU, steal or memory pressure above brokerbench.host\'s thresholds): its figures measured the host as '
    + 'much as the broker and enter no claim and no regression verdict';
  function hostBadge(host) {
    if (!host || !host.busy) return null;
    return h('span', { class: 'badge host-busy', title: `${HOST_BUSY}: ${(host.reasons || []).join('; ')}` },
      'host busy');
  }

  // A cell whose acknowledgements or deliveries were not all stamped at the kernel's arrival (results' `ack_stamps`,
  // `delivery_stamps`; brokerbench.figures.late_stamps): marked as every table marks it, the run's `stamps_note` under
  // the table says how each was stamped.
  const STAMP_MARK = '†';
  const stampedLate = (...values) => values.some((v) => (v || '').split(', ').some((p) => p && p !== 'arrival'));

  function runLink(runId) {
    return h('a', { href: `#/runs/${enc(runId)}`, class: 'run-id' }, runId);
  }

  function uuid() {
    if (window.crypto?.randomUUID) return crypto.randomUUID();
    // Outside a secure context (an http:// S3 website) randomUUID is missing: a version 4 UUID by hand.
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  function errorBox(error, ...extra) {
    const status = error.status ? `HTTP ${error.status}: ` : '';
    return h('div', { class: 'error-box', role: 'alert' }, h('strong', {}, status), error.message, ...extra);
  }

  function progressBar(cells, labelText) {
    const total = cells?.total || 0;
    const completed = cells?.completed || 0;
    const failed = cells?.failed || 0;
    const done = completed + failed;
    const pct = (n) => (total ? `${(100 * n) / total}%` : '0%');
    const text = `${fmtNumber(done)} of ${fmtNumber(total)} cells done` + (failed ? `, ${fmtNumber(failed)} failed` : '');
    return h('div', {
      class: 'progress', role: 'progressbar', 'aria-label': labelText || 'cells done',
      'aria-valuemin': 0, 'aria-valuemax': total, 'aria-valuenow': done, 'aria-valuetext': text, title: text,
    },
    h('span', { class: 'progress-completed', style: `width:${pct(completed)}` }),
    h('span', { class: 'progress-failed', style: `width:${pct(failed)}` }));
  }

  function progressText(cells) {
    const total = cells?.total || 0;
    const failed = cells?.failed || 0;
    const done = (cells?.completed || 0) + failed;
    return h('span', { class: 'progress-text' }, `${fmtNumber(done)}/${fmtNumber(total)}`,
      failed ? h('span', { class: 'failed-count' }, ` (${fmtNumber(failed)} failed)`) : null);
  }

  function table(caption, headers, rows, attrs = {}) {
    return h('table', attrs,
      caption ? h('caption', {}, caption) : null,
      h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col', class: x.class }, x.text ?? x)))),
      h('tbody', {}, rows));
  }

  // -- page frame ------------------------------------------------------------------------------
  const main = document.getElementById('main');
  const notice = document.getElementById('notice');

  function setNotice(text) {
    notice.hidden = !text;
    notice.textContent = text || '';
  }

  function page(title, ...children) {
    document.title = `${title} · brokerbench`;
    fill(main, h('h1', {}, title), ...children);
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
    });
  }

  // -- runs list -------------------------------------------------------------------------------
  async function runsView(params, signal) {
    const filters = { suite: params.get('suite') || '', status: params.get('status') || '' };
    const state = { runs: [], next: null, selected: new Set() };
    const suiteSelect = h('select', { id: 'filter-suite', name: 'suite' }, h('option', { value: '' }, 'any suite'));
    const statusSelect = h('select', { id: 'filter-status', name: 'status' }, h('option', { value: '' }, 'any status'),
      STATUSES.map((s) => h('option', { value: s, selected: s === filters.status }, label(s))));
    const applyFilters = () => {
      location.hash = `#/runs${query({ suite: suiteSelect.value, status: statusSelect.value })}`;
    };
    suiteSelect.addEventListener('change', applyFilters);
    statusSelect.addEventListener('change', applyFilters);
    const compareButton = h('button', { type: 'button', id: 'compare-selected', disabled: true },
      'Compare selected');
    compareButton.addEventListener('click', () => {
      const chosen = state.runs.filter((r) => state.selected.has(r.run_id))
        .sort((a, b) => String(a.requested_at).localeCompare(String(b.requested_at)));
      if (chosen.length === 2) {
        location.hash = `#/compare${query({ baseline: chosen[0].run_id, candidate: chosen[1].run_id })}`;
      }
    });
    const live = h('span', { class: 'live muted', role: 'status' });
    const body = h('tbody', {});
    const more = h('button', { type: 'button', id: 'more-runs', hidden: true }, 'More runs');
    const listError = h('div', {});

    page('Runs',
      h('div', { class: 'toolbar' },
        h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter runs', onsubmit: (e) => e.preventDefault() },
          h('label', { for: 'filter-suite' }, 'Suite'), suiteSelect,
          h('label', { for: 'filter-status' }, 'Status'), statusSelect),
        h('span', { class: 'spacer' }),
        live,
        compareButton,
        h('a', { class: 'button primary', href: '#/new' }, 'Start a run')),
      listError,
      h('table', { id: 'runs', class: 'runs' },
        h('caption', { class: 'visually-hidden' }, 'Runs, newest first'),
        h('thead', {}, h('tr', {},
          ['Compare', 'Run', 'Name', 'Suite', 'Status', 'Cells', 'Progress', 'Requested', 'Duration']
            .map((t) => h('th', { scope: 'col' }, t)))),
        body),
      h('p', {}, more));

    api('suites', { signal }).then((data) => {
      const names = (data.suites || []).map((s) => s.name);
      if (filters.suite && !names.includes(filters.suite)) names.push(filters.suite);
      append(suiteSelect, names.map((n) => h('option', { value: n, selected: n === filters.suite }, n)));
    }).catch(() => {});

    function row(run) {
      const duration = run.finished_at && run.requested_at
        ? (new Date(run.finished_at) - new Date(run.requested_at)) / 1000 : null;
      const box = h('input', {
        type: 'checkbox', checked: state.selected.has(run.run_id), 'aria-label': `select run ${run.run_id} for comparison`,
        dataset: { runId: run.run_id },
      });
      box.addEventListener('change', () => {
        if (box.checked) state.selected.add(run.run_id); else state.selected.delete(run.run_id);
        updateSelection();
      });
      return h('tr', { dataset: { runId: run.run_id, status: run.status } },
        h('td', {}, box),
        h('td', {}, runLink(run.run_id)),
        h('td', {}, run.name || '–'),
        h('td', {}, run.suite || h('span', { class: 'muted' }, 'spec')),
        h('td', {}, statusBadge(run.status)),
        h('td', { class: 'num' }, progressText(run.cells)),
        h('td', {}, progressBar(run.cells, `cells of run ${run.run_id}`)),
        h('td', {}, fmtTime(run.requested_at)),
        h('td', { class: 'num' }, ACTIVE.has(run.status) ? h('span', { class: 'muted' }, 'running') : fmtDuration(duration)));
    }

    function updateSelection() {
      compareButton.disabled = state.selected.size !== 2;
      compareButton.textContent = state.selected.size === 2 ? 'Compare selected (2)'
        : `Compare selected (${state.selected.size}/2)`;
    }

    function render() {
      fill(body, ...(state.runs.length ? state.runs.map(row)
        : [h('tr', {}, h('td', { colspan: 9, class: 'empty' }, 'No runs yet. ', h('a', { href: '#/new' }, 'Start one.')))]));
      more.hidden = !state.next;
      updateSelection();
    }

    async function load(next) {
      const data = await api(`runs${query({ ...filters, limit: PAGE_SIZE, next })}`, { signal });
      if (next) {
        const seen = new Set(state.runs.map((r) => r.run_id));
        state.runs.push(...data.runs.filter((r) => !seen.has(r.run_id)));
        state.next = data.next;
      } else {
        // A refresh of the first page: newer runs go on top, known runs are updated in place, and the
        // pages loaded with "more" stay (run ids start with their time, so they sort by age).
        const fresh = new Set(data.runs.map((r) => r.run_id));
        const oldest = data.runs.length ? data.runs[data.runs.length - 1].run_id : null;
        const kept = oldest ? state.runs.filter((r) => !fresh.has(r.run_id) && r.run_id < oldest) : [];
        state.runs = [...data.runs, ...kept];
        if (!kept.length) state.next = data.next;
      }
      render();
    }

    more.addEventListener('click', async () => {
      more.disabled = true;
      try { await load(state.next); } catch (error) { if (!signal.aborted) fill(listError, errorBox(error)); }
      more.disabled = false;
    });

    try {
      await load();
    } catch (error) {
      if (signal.aborted) return;
      fill(listError, errorBox(error));
    }
    // Live while any run shown is active.
    while (!signal.aborted) {
      const active = state.runs.some((r) => ACTIVE.has(r.status));
      live.textContent = active ? 'live: refreshing every 2 s' : '';
      await sleep(active ? LIST_POLL_MS : LIST_IDLE_POLL_MS, signal);
      if (signal.aborted) break;
      try {
        await load();
        fill(listError);
      } catch (error) {
        if (!signal.aborted) fill(listError, errorBox(error));
      }
    }
  }

  // -- start a run -----------------------------------------------------------------------------
  // The location of `field` ("sizes[0]", "client.acks") in the pasted JSON text, best effort: the key
  // named last in the path, searched after the keys before it.
  function fieldRange(text, field) {
    const keys = String(field).split(/[.[\]]+/).filter((k) => k && !/^\d+$/.test(k));
    let from = 0;
    let found = null;
    for (const key of keys) {
      const at = text.indexOf(JSON.stringify(key), from);
      if (at < 0) break;
      found = [at, at + key.length + 2];
      from = at + 1;
    }
    return found;
  }

  function jsonErrorPosition(text, error) {
    const m = /position (\d+)/.exec(error.message);
    if (m) {
      const pos = Number(m[1]);
      const before = text.slice(0, pos).split('\n');
      return { pos, line: before.length, column: before[before.length - 1].length + 1 };
    }
    const lc = /line (\d+) column (\d+)/.exec(error.message);
    return lc ? { pos: null, line: Number(lc[1]), column: Number(lc[2]) } : null;
  }

  async function newRunView(params, signal) {
    const state = { submission: null, suites: [] };
    const mode = params.get('spec') !== null ? 'spec' : 'suite';
    const suiteSelect = h('select', { id: 'suite', name: 'suite', 'aria-describedby': 'suite-info suite-errors' });
    const suiteInfo = h('p', { id: 'suite-info', class: 'hint' });
    const suiteErrors = h('ul', { id: 'suite-errors', class: 'field-errors', 'aria-live': 'polite' });
    const specText = h('textarea', {
      id: 'spec', name: 'spec', rows: 16, spellcheck: 'false', autocomplete: 'off',
      'aria-describedby': 'spec-hint spec-errors',
    });
    specText.value = JSON.stringify(EXAMPLE_SPEC, null, 2);
    const specErrors = h('ul', { id: 'spec-errors', class: 'field-errors', 'aria-live': 'polite' });
    const radio = (value, text) => h('label', { class: 'choice' },
      h('input', { type: 'radio', name: 'source', value, checked: value === mode }), ' ', text);
    // A study's runs start one at a time: each is an option of its own (value "study/run").
    const scaleInput = h('input', { id: 'scale', name: 'scale', type: 'number', min: '0', max: '1', step: 'any',
      placeholder: '1 (as written)', 'aria-describedby': 'scale-hint' });
    const suiteFields = h('div', { id: 'suite-fields', class: 'source-fields' },
      h('label', { for: 'suite' }, 'Suite'), suiteSelect, suiteInfo,
      h('label', { for: 'scale' }, 'Scale'), scaleInput,
      h('p', { id: 'scale-hint', class: 'hint' }, 'Above 0 and at most 1: shortens durations, counts and repeats, as ',
        h('code', {}, 'brokerbench run --scale'), ' does. Empty: the suite as written.'),
      suiteErrors,
      h('button', { type: 'button', id: 'suite-as-spec', class: 'link-button' }, 'Edit this suite as a spec'));
    const specFields = h('div', { id: 'spec-fields', class: 'source-fields' },
      h('label', { for: 'spec' }, 'Run spec (JSON)'),
      h('p', { id: 'spec-hint', class: 'hint' }, 'The request ', h('code', {}, 'brokerbench run --spec'),
        ' takes: brokers, sizes, rates and formats are required; see the API\'s ',
        h('a', { href: apiUrl('openapi.json'), target: '_blank', rel: 'noopener' }, 'OpenAPI document'), '.'),
      specText, specErrors);
    const submit = h('button', { type: 'submit', class: 'primary', id: 'start-run' }, 'Start run');
    const outcome = h('div', { id: 'start-outcome', role: 'status', 'aria-live': 'polite' });
    const form = h('form', { id: 'new-run', novalidate: true },
      h('fieldset', {}, h('legend', {}, 'What to run'), radio('suite', 'A suite'), radio('spec', 'A pasted spec')),
      suiteFields, specFields, h('div', { class: 'actions' }, submit), outcome);
    page('Start a run', form);

    const source = () => form.querySelector('input[name=source]:checked').value;
    function showSource() {
      suiteFields.hidden = source() !== 'suite';
      specFields.hidden = source() !== 'spec';
    }
    showSource();

    function clearProblems() {
      for (const list of [suiteErrors, specErrors]) fill(list);
      for (const el of [suiteSelect, specText]) { el.removeAttribute('aria-invalid'); el.classList.remove('invalid'); }
    }
    // Any change makes a new submission; only a retry of the same one keeps its Idempotency-Key.
    form.addEventListener('input', () => { state.submission = null; });
    form.addEventListener('change', (e) => {
      state.submission = null;
      if (e.target.name === 'source') { clearProblems(); showSource(); }
      if (e.target === suiteSelect) describeSuite();
    });

    const chosen = () => {
      const [suite, run] = suiteSelect.value.split('/');
      return { suite, run };
    };

    function describeSuite() {
      const suite = state.suites.find((s) => s.name === chosen().suite);
      fill(suiteInfo, ...(suite ? [suite.description || '', ' ',
        h('span', { class: 'muted' }, `${fmtNumber(suite.cells)} cells, about ${fmtDuration(suite.estimated_s)}`)] : []));
    }

    function markInvalid(el, list, problems) {
      el.setAttribute('aria-invalid', 'true');
      el.classList.add('invalid');
      fill(list, ...problems.map((p) => {
        const item = h('li', { class: 'problem', dataset: { field: p.field ?? '' } },
          h('code', { class: 'field-path' }, p.field || '(the whole request)'), ' ', p.message);
        if (el === specText && p.field) {
          item.classList.add('jump');
          item.title = 'select this field in the spec';
          item.addEventListener('click', () => {
            const range = fieldRange(specText.value, p.field);
            specText.focus();
            if (range) specText.setSelectionRange(range[0], range[1]);
          });
        }
        return item;
      }));
    }

    document.getElementById('suite-as-spec').addEventListener('click', async () => {
      try {
        const { suite: name, run } = chosen();
        const suite = await api(`suites/${enc(name)}`, { signal });
        specText.value = JSON.stringify(run ? suite.requests[run] : suite.request, null, 2);
        form.querySelector('input[value=spec]').checked = true;
        state.submission = null;
        clearProblems();
        showSource();
        specText.focus();
      } catch (error) {
        if (!signal.aborted) fill(outcome, errorBox(error));
      }
    });

    async function busyDetails(error) {
      const box = h('div', { class: 'busy-box', role: 'alert', id: 'busy' },
        h('strong', {}, 'Busy, nothing started. '), error.message || 'Another run is using the stack.');
      try {
        const recent = await api(`runs${query({ limit: 10 })}`, { signal });
        const run = (recent.runs || []).find((r) => ACTIVE.has(r.status));
        if (run) append(box, ' Running now: ', runLink(run.run_id), '.');
      } catch { /* the message above says enough */ }
      return box;
    }

    async function send() {
      clearProblems();
      fill(outcome);
      let body;
      if (source() === 'suite') {
        if (!suiteSelect.value) {
          markInvalid(suiteSelect, suiteErrors, [{ field: 'suite', message: 'choose a suite' }]);
          return;
        }
        const { suite, run } = chosen();
        body = { suite, ...(run ? { run } : {}), ...(scaleInput.value !== '' ? { scale: Number(scaleInput.value) } : {}) };
      } else {
        try {
          body = JSON.parse(specText.value);
        } catch (error) {
          const at = jsonErrorPosition(specText.value, error);
          markInvalid(specText, specErrors, [{
            field: '',
            message: `${at ? `line ${at.line}, column ${at.column}: ` : ''}${error.message.replace(/\s*in JSON at position \d+.*$/, '')}`,
          }]);
          specErrors.firstChild.querySelector('.field-path').textContent = 'JSON';
          if (at && at.pos !== null) { specText.focus(); specText.setSelectionRange(at.pos, at.pos + 1); }
          return;
        }
        if (!body || typeof body !== 'object' || Array.isArray(body)) {
          markInvalid(specText, specErrors, [{ field: '', message: 'a run spec is a JSON object' }]);
          return;
        }
      }
      if (!state.submission) state.submission = { key: uuid() };
      submit.disabled = true;
      form.setAttribute('aria-busy', 'true');
      fill(outcome, h('span', { class: 'muted' }, 'Starting…'));
      try {
        const started = await api('runs', { method: 'POST', body, headers: { 'Idempotency-Key': state.submission.key }, signal });
        state.submission = null;
        location.hash = `#/runs/${enc(started.run_id)}`;
      } catch (error) {
        if (signal.aborted) return;
        if (!error.retryable) state.submission = null;
        if (error.status === 422) {
          const problems = error.problems.length ? error.problems : [{ field: error.field, message: error.message }];
          const atSuite = problems.filter((p) => p.field === 'suite');
          const atSpec = problems.filter((p) => p.field !== 'suite');
          if (atSuite.length) markInvalid(suiteSelect, suiteErrors, atSuite);
          if (atSpec.length) {
            if (source() === 'spec') markInvalid(specText, specErrors, atSpec);
            else markInvalid(suiteSelect, suiteErrors, atSpec);
          }
          fill(outcome, h('p', { class: 'error-text' },
            `The API rejected the request: ${problems.length} problem${problems.length === 1 ? '' : 's'}, shown at the field.`));
          (source() === 'spec' ? specText : suiteSelect).focus();
        } else if (error.status === 409) {
          fill(outcome, await busyDetails(error));
        } else if (error.retryable) {
          const retry = h('button', { type: 'button', id: 'retry' }, 'Retry');
          retry.addEventListener('click', () => send());
          fill(outcome, errorBox(error, ' ', retry,
            h('span', { class: 'muted' }, ' (a retry is recognised by the API: it cannot start the run twice)')));
        } else {
          fill(outcome, errorBox(error));
        }
      } finally {
        submit.disabled = false;
        form.removeAttribute('aria-busy');
      }
    }

    form.addEventListener('submit', (e) => { e.preventDefault(); send(); });

    try {
      const data = await api('suites', { signal });
      state.suites = data.suites || [];
      const wanted = params.get('suite') || (state.suites.some((s) => s.name === 'smoke') ? 'smoke' : null);
      fill(suiteSelect, h('option', { value: '' }, 'choose a suite…'), state.suites.flatMap((s) => (s.runs || []).length
        ? (s.runs || []).map((run) => h('option', { value: `${s.name}/${run}` }, `${s.name} · ${run} (one run of a study)`))
        : [h('option', { value: s.name, selected: s.name === wanted },
          `${s.name} — ${fmtNumber(s.cells)} cells, ~${fmtDuration(s.estimated_s)}`)]));
      describeSuite();
    } catch (error) {
      if (!signal.aborted) fill(suiteErrors, h('li', {}, `suites could not be loaded: ${error.message}`));
    }
  }

  // -- one run ---------------------------------------------------------------------------------
  async function runView(runId, signal) {
    const heading = h('span', { class: 'status-line', id: 'run-status' });
    const cancel = h('button', { type: 'button', id: 'cancel-run', class: 'danger', hidden: true }, 'Cancel run');
    const progress = h('section', { id: 'run-progress', 'aria-label': 'progress' });
    const timings = h('dl', { id: 'run-timings', class: 'facts' });
    const cells = h('section', { id: 'run-cells', 'aria-labelledby': 'cells-heading' });
    const spec = h('details', { id: 'run-spec', hidden: true });
    const report = h('section', { id: 'run-report', 'aria-labelledby': 'report-heading', hidden: true });
    const problems = h('div', {});
    page(`Run ${runId}`,
      h('div', { class: 'toolbar' }, heading, h('span', { class: 'spacer' }), cancel,
        h('a', { class: 'button', href: `#/compare${query({ candidate: runId })}` }, 'Compare with…')),
      problems, progress, timings, cells, spec, report);

    let run = null;
    cancel.addEventListener('click', async () => {
      cancel.disabled = true;
      cancel.textContent = 'Cancelling…';
      try {
        await api(`runs/${enc(runId)}/cancel`, { method: 'POST', signal });
        fill(problems, h('p', { class: 'hint', role: 'status' },
          'Cancel requested: the cell running now stops, the targets are torn down, what was measured is kept.'));
      } catch (error) {
        if (signal.aborted) return;
        fill(problems, error.status === 409
          ? h('p', { class: 'hint', role: 'status' }, 'The run had already ended.') : errorBox(error));
        cancel.disabled = false;
        cancel.textContent = 'Cancel run';
      }
    });

    function render() {
      const active = ACTIVE.has(run.status);
      fill(heading, statusBadge(run.status), ' ', run.name || '', run.suite ? [' · suite ', h('a', {
        href: `#/history${query({ suite: run.suite })}`, id: 'run-suite-history', title: 'the suite\'s series' }, run.suite)] : '',
        active ? h('span', { class: 'live muted' }, ' · live') : null);
      cancel.hidden = !active || run.status === 'cancelling';
      const p = run.progress || { ...run.cells, fraction: null };
      fill(progress,
        progressBar(p, 'cells done'),
        h('p', { class: 'progress-caption' },
          `${fmtNumber(p.completed || 0)} completed, ${fmtNumber(p.failed || 0)} failed, ${fmtNumber(p.total || 0)} in all`,
          p.fraction !== null && p.fraction !== undefined ? ` (${fmtNumber(p.fraction * 100)} %)` : ''),
        run.reason ? h('p', { class: 'reason', id: 'run-reason' }, h('strong', {}, 'Reason: '), run.reason) : null);
      const t = run.timings || {};
      const elapsed = active && t.requested_at ? (Date.now() - new Date(t.requested_at)) / 1000 : null;
      fill(timings,
        h('dt', {}, 'Requested'), h('dd', {}, fmtTime(t.requested_at || run.requested_at)),
        h('dt', {}, 'Finished'), h('dd', {}, fmtTime(t.finished_at || run.finished_at)),
        h('dt', {}, active ? 'Elapsed' : 'Duration'), h('dd', {}, fmtDuration(active ? elapsed : t.duration_s)));
      const detail = run.cells_detail || [];
      fill(cells, h('h2', { id: 'cells-heading' }, 'Cells'),
        detail.length ? table(null, ['Cell', 'Broker', 'Format', 'Size', 'Target rate', 'Status',
          { text: 'Throughput', class: 'num' }, 'Verdict', 'Reason'],
        detail.map((c) => h('tr', { dataset: { cellId: c.cell_id, status: c.status } },
          h('td', { class: 'cell-id' }, c.cell_id),
          h('td', {}, c.broker),
          h('td', {}, c.format, stampedLate(c.ack_stamps, c.delivery_stamps)
            ? h('span', { class: 'stamp-mark', title: 'not stamped at arrival: see the note under the table' },
              ` ${STAMP_MARK}`) : null),
          h('td', { class: 'num' }, fmtBytes(c.size_bytes)),
          h('td', { class: 'num' }, fmtRate(c.rate_target)),
          h('td', {}, statusBadge(c.status)),
          h('td', { class: 'num' }, fmtRate(c.throughput_msgs_per_s)),
          h('td', {}, verdictBadge(c.verdict), limitBadge(c.limit) ? ' ' : null, limitBadge(c.limit),
            consumerBadge(c.limit) ? ' ' : null, consumerBadge(c.limit),
            hostBadge(c.host) ? ' ' : null, hostBadge(c.host)),
          h('td', { class: 'reason-cell' }, c.reason || ''))), { id: 'cells-table' })
          : h('p', { class: 'muted' }, 'No cells planned yet.'),
        detail.some((c) => c.limit?.by === 'client')
          ? h('p', { class: 'hint', id: 'client-bound-legend' }, h('strong', {}, 'client-bound: '), CLIENT_BOUND) : null,
        detail.some((c) => c.limit?.consumers?.by === 'consumer')
          ? h('p', { class: 'hint', id: 'consumer-bound-legend' }, h('strong', {}, 'consumer-bound: '), CONSUMER_BOUND)
          : null,
        detail.some((c) => c.host?.busy)
          ? h('p', { class: 'hint', id: 'host-busy-legend' }, h('strong', {}, 'host busy: '), HOST_BUSY) : null,
        run.stamps_note ? h('p', { class: 'hint', id: 'stamps-legend' }, run.stamps_note) : null);
      if (run.spec && !spec.dataset.filled) {
        spec.dataset.filled = '1';
        fill(spec, h('summary', {}, 'Spec'), h('pre', {}, JSON.stringify(run.spec, null, 2)));
        spec.hidden = false;
      }
      if (!active && report.hidden) showReport(Boolean(run.requested_at || detail.length));
    }

    function showReport(stored) {
      report.hidden = false;
      if (!stored) { // ended before its request was stored (e.g. cancelled while starting): nothing to report
        fill(report, h('h2', { id: 'report-heading' }, 'Report'),
          h('p', { class: 'muted', id: 'no-report' }, 'This run stored nothing, so it has no report.'));
        return;
      }
      const base = `runs/${enc(runId)}/report`;
      const frame = h('iframe', {
        id: 'report-frame', title: `Report of run ${runId}`, src: apiUrl(`${base}?format=html`), loading: 'eager',
      });
      frame.addEventListener('load', () => {
        try { // same origin only: fit the frame to its report
          const doc = frame.contentDocument;
          if (doc?.body) frame.style.height = `${Math.max(400, doc.documentElement.scrollHeight + 20)}px`;
        } catch { /* the API on another origin: the frame keeps its own scroll bar */ }
      });
      fill(report, h('h2', { id: 'report-heading' }, 'Report'),
        h('p', { class: 'report-links' },
          h('a', { href: apiUrl(`${base}?format=html`), target: '_blank', rel: 'noopener', id: 'report-html' }, 'Open the HTML report'),
          ' · ', h('a', { href: apiUrl(`${base}?format=md`), target: '_blank', rel: 'noopener', id: 'report-md' }, 'Markdown'),
          ' · ', h('a', { href: apiUrl(`${base}?format=json`), target: '_blank', rel: 'noopener', id: 'report-json' }, 'JSON')),
        frame);
    }

    while (!signal.aborted) {
      try {
        run = await api(`runs/${enc(runId)}`, { signal });
        problems.querySelector('.error-box')?.remove();
        render();
      } catch (error) {
        if (signal.aborted) return;
        if (error.status === 404 || error.status === 422) {
          page(`Run ${runId}`, errorBox(error), h('p', {}, h('a', { href: '#/runs' }, 'Back to the runs')));
          return;
        }
        fill(problems, errorBox(error, h('span', { class: 'muted' }, ' (retrying)')));
      }
      if (run && !ACTIVE.has(run.status)) return;
      await sleep(RUN_POLL_MS, signal);
    }
  }

  // -- compare ---------------------------------------------------------------------------------
  async function compareView(params, signal) {
    const baseline = params.get('baseline') || '';
    const candidate = params.get('candidate') || '';
    const baselineSelect = h('select', { id: 'baseline', name: 'baseline', required: true });
    const candidateSelect = h('select', { id: 'candidate', name: 'candidate', required: true });
    const swap = h('button', { type: 'button', id: 'swap', title: 'swap baseline and candidate' }, '⇄ Swap');
    const form = h('form', { id: 'compare-form', class: 'inline-form' },
      h('div', {}, h('label', { for: 'baseline' }, 'Baseline run'), baselineSelect),
      swap,
      h('div', {}, h('label', { for: 'candidate' }, 'Candidate run'), candidateSelect),
      h('button', { type: 'submit', class: 'primary', id: 'compare-button' }, 'Compare'));
    const result = h('section', { id: 'compare-result', 'aria-live': 'polite' });
    page('Compare two runs', h('p', { class: 'hint' },
      'Each configuration the two runs share, each metric: regression, improvement, unstable (no conclusion) or unchanged.'),
    form, result);

    swap.addEventListener('click', () => {
      const b = baselineSelect.value;
      baselineSelect.value = candidateSelect.value;
      candidateSelect.value = b;
    });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!baselineSelect.value || !candidateSelect.value) return;
      location.hash = `#/compare${query({ baseline: baselineSelect.value, candidate: candidateSelect.value })}`;
    });

    const runs = [];
    try {
      const data = await api(`runs${query({ limit: 100 })}`, { signal });
      runs.push(...data.runs.filter((r) => !ACTIVE.has(r.status)));
    } catch (error) {
      if (signal.aborted) return;
      fill(result, errorBox(error));
    }
    for (const id of [baseline, candidate]) {
      if (id && !runs.some((r) => r.run_id === id)) runs.push({ run_id: id });
    }
    const options = (chosen) => [h('option', { value: '' }, 'choose a run…'), runs.map((r) => h('option',
      { value: r.run_id, selected: r.run_id === chosen },
      [r.run_id, r.name, r.status && label(r.status)].filter(Boolean).join(' · ')))];
    fill(baselineSelect, ...options(baseline));
    fill(candidateSelect, ...options(candidate));

    if (!baseline || !candidate) return;
    fill(result, h('p', { class: 'muted' }, 'Comparing…'));
    let data;
    try {
      [data] = await Promise.all([api(`compare${query({ baseline, candidate })}`, { signal }), loadMetrics()]);
    } catch (error) {
      if (!signal.aborted) fill(result, errorBox(error));
      return;
    }
    const verdicts = [...(data.verdicts || [])].sort((a, b) =>
      (VERDICT_ORDER[a.verdict] ?? 9) - (VERDICT_ORDER[b.verdict] ?? 9));
    const summary = data.summary || {};
    // The figures the change is of: the geometric means of each run's samples (change = candidate ÷ baseline − 1).
    const larger = (v) => Math.max(v.baseline_mean ?? 0, v.candidate_mean ?? 0);
    const cellName = (c) => (typeof c === 'string' ? c : JSON.stringify(c));
    fill(result,
      h('h2', {}, 'Candidate ', runLink(data.candidate || candidate), ' against baseline ', runLink(data.baseline || baseline)),
      h('ul', { class: 'summary', id: 'compare-summary' }, ['regression', 'improvement', 'unstable', 'unchanged'].map((v) =>
        h('li', { class: `verdict-${v}` }, h('strong', {}, fmtNumber(summary[v] || 0)), ` ${label(v)}`))),
      verdicts.length ? table('Verdicts, regressions first. Baseline and candidate: the geometric means of each '
        + 'run\'s samples (its repeats, or blocks of a single repeat\'s intervals); change = candidate ÷ baseline − 1',
        ['Verdict', 'Configuration', 'Metric', { text: 'Baseline (geo. mean)', class: 'num' },
          { text: 'Candidate (geo. mean)', class: 'num' },
          { text: 'Change', class: 'num' }, { text: 'p', class: 'num' }, 'Why'],
        verdicts.map((v) => h('tr', { class: `row-${v.verdict}`, dataset: { verdict: v.verdict } },
          h('td', {}, verdictBadge(v.verdict)),
          h('td', {}, cellName(v.cell)),
          h('td', {}, metricName(v.metric)),
          h('td', { class: 'num' }, fmtFigure(v.metric, v.baseline_mean, larger(v))),
          h('td', { class: 'num' }, fmtFigure(v.metric, v.candidate_mean, larger(v))),
          h('td', { class: 'num' }, fmtPercent(v.change)),
          h('td', { class: 'num' }, fmtP(v.p_value)),
          h('td', { class: 'why' }, v.why || ''))), { id: 'compare-table', class: 'verdicts' })
        : h('p', { class: 'muted', id: 'compare-empty' }, 'The two runs share no configuration to compare.'));
  }

  // -- a suite's history -----------------------------------------------------------------------
  // The metrics a suite's series are kept of: those the regression checks read (GET /metrics, `regression`).
  function historyMetrics() {
    return Object.values(METRICS).filter((m) => m.regression).map((m) => m.key);
  }
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // svg('line', {x1: 0, ...}, child): h() for SVG elements.
  function svg(tag, attrs = {}, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
    return append(el, children);
  }

  function niceTicks(top) {
    const step = 10 ** Math.floor(Math.log10(top / 4));
    const factor = [1, 2, 5, 10].find((f) => top / (step * f) <= 5) || 10;
    const ticks = [];
    for (let t = 0; t <= top + 1e-9; t += step * factor) ticks.push(t);
    return ticks;
  }

  // One configuration's series: a point per run (a link to its run page), the mean between change points as a
  // dashed step, each change point a line between the run before it and the run it began with (drawn larger).
  function seriesChart(series) {
    const [W, H, L, R, T, B] = [560, 230, 58, 14, 18, 36];
    const { scale, unit } = METRICS[series.metric] || { scale: 1, unit: '' }; // as declared: µs shown in ms
    const n = series.points.length;
    // a series net of the host is drawn as tested (its change points' means are on that scale); as measured in its titles
    const values = series.points.map((p) => ((series.adjustment && p.tested != null) ? p.tested : p.value) / scale);
    const changes = series.change_points || [];
    const means = changes.length ? [changes[0].before_mean, ...changes.map((c) => c.after_mean)].map((v) => v / scale) : [];
    const top = Math.max(...values, ...means) * 1.05 || 1;
    const x = (i) => (n > 1 ? L + 8 + (i * (W - L - R - 16)) / (n - 1) : (L + W - R) / 2);
    const y = (v) => H - B - (v / top) * (H - B - T);
    const sides = new Map();
    for (const c of changes) { sides.set(c.index - 1, 'change-before'); sides.set(c.index, 'change-began'); }
    const bounds = [0, ...changes.map((c) => c.index), n];
    const step = means.flatMap((m, k) => [
      [bounds[k] === 0 ? x(0) : (x(bounds[k] - 1) + x(bounds[k])) / 2, y(m)],
      [bounds[k + 1] === n ? x(n - 1) : (x(bounds[k + 1] - 1) + x(bounds[k + 1])) / 2, y(m)]]);
    return svg('svg', {
      class: 'series-chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
      'aria-label': `${metricName(series.metric)} of ${series.cell} over ${n} runs, ${changes.length} change point(s)`,
    },
    niceTicks(top).map((t) => [
      svg('line', { x1: L, x2: W - R, y1: y(t).toFixed(1), y2: y(t).toFixed(1), class: 'grid' }),
      svg('text', { x: L - 6, y: (y(t) + 4).toFixed(1), 'text-anchor': 'end', class: 'tick' }, fmtNumber(t, t < 10 && t > 0 ? 2 : 0))]),
    svg('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'frame' }),
    svg('text', { x: (L + W - R) / 2, y: H - 8, 'text-anchor': 'middle', class: 'axis' }, `run of the suite, oldest → newest (${n})`),
    svg('text', { transform: `translate(14 ${(T + H - B) / 2}) rotate(-90)`, 'text-anchor': 'middle', class: 'axis' }, unit),
    changes.map((c) => {
      const at = ((x(c.index - 1) + x(c.index)) / 2).toFixed(1);
      return svg('g', { class: `change-point${c.alert ? ' alert' : ''}`, 'data-began': c.began_run_id, 'data-before': c.before_run_id },
        svg('title', {}, `change ${fmtPercent(c.change)} began with run ${c.began_run_id}; the run before: ${c.before_run_id}`),
        svg('line', { x1: at, x2: at, y1: T, y2: H - B }),
        svg('text', { x: Number(at) + 3, y: T + 10, class: 'tick' }, fmtPercent(c.change)));
    }),
    step.length ? svg('polyline', { class: 'segment-mean', points: step.map((p) => `${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(' ') }) : null,
    svg('polyline', { class: 'series-line', points: values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ') }),
    series.points.map((p, i) => svg('a', { href: `#/runs/${enc(p.run_id)}`, class: 'run-point' },
      svg('circle', { cx: x(i).toFixed(1), cy: y(values[i]).toFixed(1), r: sides.has(i) ? 5 : 3, class: sides.get(i) || 'run',
        'data-run': p.run_id },
      svg('title', {}, `run ${p.run_id}: ${fmtFigure(series.metric, p.value)}${series.adjustment && p.tested != null ? `, net of the host ${fmtFigure(series.metric, p.tested)}` : ''} (${p.repeats.length} repeat(s)); code ${p.code_version || '–'}`)))));
  }

  function changePointItem(c, metric) {
    const differs = (c.differences || []).filter((d) => d.setting !== 'code_version').map((d) => d.setting);
    const before = c.versions?.before || {};
    const after = c.versions?.after || {};
    const code = before.code_version === after.code_version ? `code ${after.code_version} on both sides`
      : `code ${before.code_version} → ${after.code_version}`;
    return h('li', { class: `change ${c.alert ? 'alert' : c.direction}`, dataset: { began: c.began_run_id } },
      h('span', { class: `badge verdict-${c.alert ? 'regression' : (c.direction === 'improvement' ? 'improvement' : 'unstable')}` },
        c.alert ? 'alert' : (c.direction === 'improvement' ? 'improvement' : 'below the alert threshold')),
      ` ${fmtPercent(c.change)} (${fmtFigure(metric, c.before_mean, Math.max(c.before_mean, c.after_mean))} → ${fmtFigure(metric, c.after_mean, Math.max(c.before_mean, c.after_mean))}, p ${fmtP(c.p_value)}) `,
      'began with run ', runLink(c.began_run_id), '; the run before: ', runLink(c.before_run_id), `; ${code}`,
      differs.length ? `; settings that differ: ${differs.join(', ')}` : '');
  }

  async function historyView(params, signal) {
    const suite = params.get('suite') || '';
    try {
      await loadMetrics();
    } catch (error) {
      if (!signal.aborted) page('A suite\'s history', errorBox(error));
      return;
    }
    const checked = historyMetrics();
    const metric = checked.includes(params.get('metric')) ? params.get('metric') : checked[0];
    const suiteInput = h('input', { type: 'text', id: 'history-suite', name: 'suite', value: suite, list: 'history-suites',
      required: true, placeholder: 'a suite or a spec name' });
    const suites = h('datalist', { id: 'history-suites' });
    const metricSelect = h('select', { id: 'history-metric', name: 'metric' },
      checked.map((m) => h('option', { value: m, selected: m === metric }, metricName(m))));
    const form = h('form', { id: 'history-form', class: 'inline-form' },
      h('div', {}, h('label', { for: 'history-suite' }, 'Suite'), suiteInput, suites),
      h('div', {}, h('label', { for: 'history-metric' }, 'Metric'), metricSelect),
      h('button', { type: 'submit', class: 'primary' }, 'Show'));
    const show = () => { location.hash = `#/history${query({ suite: suiteInput.value.trim(), metric: metricSelect.value })}`; };
    form.addEventListener('submit', (e) => { e.preventDefault(); show(); });
    metricSelect.addEventListener('change', () => { if (suiteInput.value.trim()) show(); });
    const body = h('section', { id: 'history', 'aria-live': 'polite' });
    page(suite ? `History of ${suite}` : 'A suite\'s history', h('p', { class: 'hint' },
      'Each configuration\'s figure over the suite\'s completed runs (the geometric mean of each run\'s repeats), '
      + 'with the change points the regression watch found: a line between the run before a change and the run it '
      + 'began with. Each point links to its run.'), form, body);
    api(`runs${query({ limit: 100 })}`, { signal }).then((data) => {
      const names = [...new Set((data.runs || []).map((r) => r.suite).filter(Boolean))].sort();
      append(suites, names.map((n) => h('option', { value: n })));
    }).catch(() => {});
    if (!suite) {
      fill(body, h('p', { class: 'muted' }, 'Choose a suite.'));
      return;
    }
    fill(body, h('p', { class: 'muted' }, 'Loading…'));
    let data;
    try {
      data = await api(`suites/${enc(suite)}/history${query({ metric })}`, { signal });
    } catch (error) {
      if (!signal.aborted) fill(body, errorBox(error));
      return;
    }
    const runs = data.runs || [];
    const series = [...(data.series || [])].sort((a, b) => (b.change_points.length > 0) - (a.change_points.length > 0));
    const found = series.reduce((k, s) => k + s.change_points.length, 0);
    fill(body,
      h('p', { id: 'history-summary' }, `${fmtNumber(runs.length)} completed run(s)`,
        runs.length ? [' from ', runLink(runs[0].run_id), ' to ', runLink(runs[runs.length - 1].run_id)] : '',
        `; ${fmtNumber(series.length)} configuration(s), ${fmtNumber(found)} change point(s). `,
        h('span', { class: 'muted' }, `Searched from ${data.method?.min_series || 'enough runs'}.`)),
      series.length ? h('div', { class: 'series-grid' }, series.map((s) => h('figure', {
        class: 'series', dataset: { key: s.key, changes: s.change_points.length, checked: s.checked, searched: s.searched },
      },
      h('figcaption', {}, h('strong', {}, s.cell), ' · ', metricName(s.metric),
        s.searched ? null : h('span', { class: 'muted' },
          s.checked ? ' · newest runs tested; too few runs to search yet' : ' · too few runs to test yet'),
        s.adjustment ? h('span', { class: 'muted net-of-host' },
          ` · net of the host (× (${fmtNumber(s.adjustment.reference)} µs / each repeat's publish delay p99) ^ ${s.adjustment.slope.toFixed(2)})`) : null),
      seriesChart(s),
      s.change_points.length ? h('ul', { class: 'change-points' }, s.change_points.map((c) => changePointItem(c, s.metric))) : null)))
        : h('p', { class: 'muted', id: 'history-empty' }, 'No configuration of this suite has this metric.'));
  }

  // -- schedules -------------------------------------------------------------------------------
  async function schedulesView(params, signal) {
    const body = h('div', {});
    page('Schedules', h('p', { class: 'hint' }, 'Regression suites run on a schedule and compared with their baseline.'), body);
    let data;
    try {
      data = await api('schedules', { signal });
    } catch (error) {
      if (!signal.aborted) fill(body, errorBox(error));
      return;
    }
    const schedules = data.schedules || [];
    if (!schedules.length) {
      fill(body, h('p', { class: 'muted', id: 'no-schedules' }, 'No schedules.'));
      return;
    }
    fill(body, table(null,
      ['Schedule', 'Suite', 'Cron', 'Enabled', 'Next due', 'Last trigger', 'Last run', 'Notify'],
      schedules.map((s) => {
        const t = s.last_trigger;
        return h('tr', { dataset: { schedule: s.name } },
          h('td', {}, h('strong', {}, s.name), s.description ? h('div', { class: 'hint' }, s.description) : null),
          h('td', {}, s.suite ? [s.suite, ' ', h('a', { href: `#/history${query({ suite: s.suite })}`, class: 'history-link' }, 'history')]
            : h('span', { class: 'muted' }, 'spec')),
          h('td', {}, h('code', {}, s.cron), s.baseline_runs > 1
            ? h('div', { class: 'hint' }, `runs back to back until the suite has ${s.baseline_runs} completed runs`) : null),
          h('td', {}, s.enabled ? 'yes' : h('span', { class: 'muted' }, 'no')),
          h('td', {}, fmtTime(s.next_due)),
          h('td', {}, t ? [fmtTime(t.due_at), ' ', h('span', { class: `badge outcome-${t.outcome}` }, label(t.outcome)),
            t.reason ? h('div', { class: 'hint' }, t.reason) : null] : h('span', { class: 'muted' }, 'never')),
          h('td', {}, s.last_run ? [runLink(s.last_run.run_id), ' ', statusBadge(s.last_run.status)]
            : h('span', { class: 'muted' }, '–')),
          h('td', {}, (s.notify || []).join(', ') || h('span', { class: 'muted' }, '–')));
      }), { id: 'schedules-table' }));
  }

  // -- router ----------------------------------------------------------------------------------
  let current = null;

  function route() {
    current?.abort();
    current = new AbortController();
    const { signal } = current;
    setNotice('');
    const hash = location.hash.replace(/^#\/?/, '');
    const [path, search] = hash.split('?');
    const params = new URLSearchParams(search || '');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    const section = parts[0] || 'runs';
    for (const link of document.querySelectorAll('nav a')) {
      if (link.dataset.section === section) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    let view;
    if (section === 'runs' && parts[1]) view = runView(parts[1], signal);
    else if (section === 'runs') view = runsView(params, signal);
    else if (section === 'new') view = newRunView(params, signal);
    else if (section === 'compare') view = compareView(params, signal);
    else if (section === 'schedules') view = schedulesView(params, signal);
    else if (section === 'history') view = historyView(params, signal);
    else view = Promise.resolve(page('Not found', h('p', {}, 'No such page. ', h('a', { href: '#/runs' }, 'See the runs.'))));
    view.catch((error) => {
      if (error.name !== 'AbortError' && !signal.aborted) setNotice(`Something went wrong: ${error.message}`);
    });
  }

  window.addEventListener('hashchange', route);
  route();
  api('health').then((health) => {
    document.getElementById('health').textContent = `${health.mode || ''} · ${health.version || ''}`;
  }).catch((error) => {
    document.getElementById('health').textContent = 'API unreachable';
    setNotice(`The API does not answer: ${error.message}`);
  });
})();
