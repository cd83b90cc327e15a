// The console's pages. Each render fetches its figures from the API and
// returns a fresh node; the router morphs the page into it, now and every
// few seconds, so that what the operator did to the page stays.
import { h, confirmAction } from './dom.js';
import { call, grants, enc, ProblemError } from './api.js';
import { num, bytes, when } from './fmt.js';
import { minuteChart } from './chart.js';
import { endpointManage, endpointCreate, endpointSettings } from './endpointform.js';
import { fleetView, searchForm, prefixOf, withPrefix } from './fleet.js';

export function problemView(err, alert = true) {
  const p = err.problem || {};
  return h('div', { class: 'problem', role: alert ? 'alert' : null },
    h('strong', {}, p.title || 'Request failed'),
    err.status ? ` (${err.status})` : '',
    h('p', {}, p.detail || err.message),
    p.request_id ? h('p', { class: 'muted' }, 'Request id ', h('code', {}, p.request_id)) : null);
}

// An action's result shows beside the control that took it, for
// RESULT_MS or until the next action, on the page it was taken on only:
// leaving the page drops it. A row's result keeps the row's place when the
// row itself is gone (a replayed row is delivered).
const RESULT_MS = 20000;
let result = null;
let resultTimer = 0;

export function clearResult() {
  clearTimeout(resultTimer);
  result = null;
  document.querySelector('[data-result]')?.remove();
  announce('', false);
}

// announce speaks text through the page's live regions, which exist from
// the start: a region added with its text is not reliably read.
export function announce(text, problem) {
  const polite = document.getElementById('announce');
  const urgent = document.getElementById('announce-alert');
  polite.textContent = '';
  urgent.textContent = '';
  if (text) (problem ? urgent : polite).textContent = text;
}

export function setResult(key, ok, content, index = 0) {
  clearTimeout(resultTimer);
  result = { key, ok, content, index };
  resultTimer = setTimeout(clearResult, RESULT_MS);
  const text = ok ? content : 'Failed: ' + (content.problem?.detail || content.message);
  announce(text, !ok);
}

// resultView is the result of the control keyed key, or null.
export function resultView(key, cols = 0) {
  if (!result || result.key !== key) return null;
  const body = result.ok ? h('p', { class: 'ok' }, result.content) : problemView(result.content, false);
  const box = cols ? h('tr', {}, h('td', { colspan: cols }, body)) : body;
  box.setAttribute('data-result', key);
  box.setAttribute('data-key', 'result-' + key);
  box.classList.add('result');
  return box;
}

// act runs a confirmed action and shows what the API said beside the
// control keyed key, scrolled into view.
export async function act(key, question, label, run, done, ctx, opts = {}) {
  if (!(await confirmAction(question, label, opts))) return;
  clearResult();
  try {
    const res = await run();
    setResult(key, true, done(res), opts.index);
  } catch (err) {
    if (err instanceof ProblemError && err.status === 401) return;
    setResult(key, false, err, opts.index);
  }
  await ctx.refresh();
  showResult();
}

export function showResult() {
  document.querySelector('[data-result]')?.scrollIntoView({ block: 'nearest' });
}

// table is a table in a box of its own that scrolls sideways when it must,
// its first column staying put; key names the box, so that a refresh keeps
// its scroll. On a phone's width the CSS stacks each row, each cell under
// its column's name, which the cell carries in data-label. The roles say
// what the elements are, as a stacked table's CSS would otherwise leave
// Chromium's accessibility tree without its table.
export function table(caption, head, rows, empty) {
  if (rows.length === 0) return h('p', { class: 'empty' }, empty);
  const t = h('table', { role: 'table' },
    h('caption', {}, h('span', {}, caption)),
    h('thead', { role: 'rowgroup' }, h('tr', { role: 'row' }, head.map((c) => h('th', { scope: 'col', role: 'columnheader' }, c)))),
    h('tbody', { role: 'rowgroup' }, rows));
  for (const tr of t.tBodies[0].rows) {
    tr.setAttribute('role', 'row');
    // A result row is one cell across the table: it has no column.
    if (tr.classList.contains('result')) {
      tr.cells[0].setAttribute('role', 'cell');
      continue;
    }
    Array.from(tr.cells).forEach((cell, i) => {
      cell.setAttribute('role', cell.tagName === 'TH' ? 'rowheader' : 'cell');
      cell.setAttribute('data-label', head[i]);
    });
  }
  return h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': caption, 'data-key': 'table-' + caption }, t);
}

export const nsPath = (ns) => '/v1/namespaces/' + enc(ns);
export const nsLink = (ns) => '#/ns/' + enc(ns);
export const streamLink = (ns, id) => nsLink(ns) + '/endpoints/' + enc(id);
export const outcomeLink = (ns, rid) => nsLink(ns) + '/outcomes/' + enc(rid);

// home is where the token's way on leads: the namespaces, which only an
// unbound admin token may list, its own namespace for a bound token, or
// the page that asks for a namespace.
function home() {
  const g = grants();
  if (g.ns) return [nsLink(g.ns), 'go to namespace ' + g.ns];
  return ['#/', g.listNamespaces ? 'go to the namespaces' : 'open a namespace'];
}

// topCrumb leads to the namespaces, or to the page that asks for one; a
// bound token has no other namespace to go to.
export const topCrumb = () => ['Namespaces', grants().ns ? null : '#/'];

export function crumbs(...items) {
  return h('nav', { 'aria-label': 'Breadcrumb', class: 'crumbs' },
    h('ol', {}, items.map(([label, href]) => h('li', {}, href ? h('a', { href }, label) : h('span', { 'aria-current': 'page' }, label)))));
}

const stateLabels = {
  delivering: 'delivering', backing_off: 'backing off', parked: 'parked', due: 'due',
  idle: 'idle', none: 'idle', corrupt: 'corrupt', disabled: 'disabled',
};
const failing = (s) => s === 'backing_off' || s === 'parked' || s === 'disabled' || s === 'corrupt';
const badge = (s) => h('span', { class: 'badge ' + (failing(s) ? 'bad' : 'good') }, stateLabels[s] || s);

function lastError(a, dated = true) {
  if (!a) return h('span', { class: 'muted' }, '—');
  // The class "status" says only that the answer's status refused it.
  const why = [a.status ? 'HTTP ' + a.status : '', a.error && a.error !== 'status' ? a.error : ''].filter(Boolean).join(', ');
  return dated ? [why, h('br'), when(h, a.at)] : why;
}

// attemptList is a pending row's failed attempts as relay kept them (the
// last ten), newest first: each one's answer or error, how long it took,
// when, and the start of the answer's body.
function attemptList(row) {
  const kept = row.attempts || [];
  if (!kept.length) return lastError(row.last_attempt);
  return h('ol', { class: 'attempts', reversed: true, start: row.attempt_count },
    [...kept].reverse().map((a) => h('li', {},
      lastError(a, false) || 'failed', ' · ', num(a.duration_ms), ' ms · ', when(h, a.at),
      a.response_excerpt ? h('pre', { class: 'excerpt' }, a.response_excerpt) : null)));
}

// disabledWhy says in words why relay disabled an endpoint.
const disabledWhy = (reason) => ({
  gone: '(it answered 410 Gone)',
  failing: '(it delivered nothing for the disable-after period while its calls failed)',
}[reason] || '(' + reason + ')');

// The namespaces page reads the fleet's figures and its failing and
// disabled namespaces (fleet.js), and one page of the list, NS_VIEW
// namespaces: each view costs relay the same whatever the number of
// namespaces.
const NS_VIEW = 100;

// rankNamespaces puts those with a failing endpoint (disabled, backing off)
// first, then the biggest backlogs, then by name.
export function rankNamespaces(list) {
  return [...list].sort((a, b) => ((b.failing > 0) - (a.failing > 0)) || b.backlog.rows - a.backlog.rows ||
    a.namespace.localeCompare(b.namespace));
}

// health says what needs an operator apart from what one disabled on
// purpose, which is not failing.
const health = (n) => {
  const badges = [];
  if (n.failing > 0) badges.push(h('span', { class: 'badge bad' }, num(n.failing) + ' failing'));
  if (n.disabled > 0) badges.push(h('span', { class: 'badge' }, num(n.disabled) + ' disabled'));
  if (!badges.length) badges.push(h('span', { class: 'badge good' }, 'healthy'));
  return badges.length === 1 ? badges[0] : h('span', {}, badges[0], ' ', badges[1]);
};

const namespaces = {
  title: () => 'Namespaces',
  // Each view reads the buckets' totals and up to NS_VIEW + 2 × FLEET_LIST
  // namespaces' rows.
  refreshMs: 15000,
  async render(r) {
    const bound = grants().ns;
    if (bound) {
      // A namespace-bound token may not list namespaces; its own is the start.
      location.replace(nsLink(bound));
      return h('p', {}, 'Opening ', bound, '…');
    }
    const cursor = r.params.get('cursor');
    const prefix = prefixOf(r);
    const row = (n) => h('tr', { class: n.failing > 0 ? 'failing' : '', 'data-key': 'ns-' + n.namespace },
      h('th', { scope: 'row', class: 'id' }, h('a', { href: nsLink(n.namespace), title: n.namespace }, n.namespace)),
      h('td', {}, health(n)),
      h('td', { class: 'n' }, num(n.endpoints)),
      h('td', { class: 'n' }, num(n.backlog.rows)),
      h('td', { class: 'n' }, bytes(n.backlog.bytes)));
    const head = ['Namespace', 'Health', 'Endpoints', 'Pending rows', 'Pending bytes'];
    const [fleet, page] = await Promise.all([
      fleetView(r, { table, row, head, rank: rankNamespaces }),
      call('GET', withPrefix('/v1/namespaces?limit=' + NS_VIEW + (cursor ? '&cursor=' + enc(cursor) : ''), prefix)),
    ]);
    const here = (c) => '#/?' + (prefix ? 'prefix=' + enc(prefix) + (c ? '&' : '') : '') + (c ? 'cursor=' + enc(c) : '');
    return h('section', {},
      h('h1', {}, 'Namespaces'),
      searchForm(prefix),
      fleet,
      h('h2', {}, prefix ? `All starting “${prefix}”, a page at a time` : 'All, a page at a time'),
      table('Namespaces, failing first, then largest backlog', head, rankNamespaces(page.namespaces).map(row),
        prefix ? `No namespace starts “${prefix}”.`
          : cursor ? 'No namespace on this page: the list changed. Go back to the first page.'
            : 'No namespace has an endpoint yet. Register one with PUT /v1/namespaces/{ns}/endpoints/{id}.'),
      h('nav', { class: 'pager', 'aria-label': 'Pages' },
        cursor ? h('a', { href: here(''), 'data-key': 'ns-first' }, 'First page') : null,
        page.next_cursor ? h('a', { href: here(page.next_cursor), 'data-key': 'ns-next' }, 'Next page') : null,
        h('span', { class: 'muted' }, `${num(NS_VIEW)} a page, the failing first on each.`)),
      openNamespace());
  },
};

function openNamespace() {
  const input = h('input', { id: 'open-ns', name: 'ns', required: true, autocomplete: 'off', spellcheck: 'false', 'data-key': 'open-ns' });
  return h('form', {
    class: 'inline', onsubmit: (e) => {
      e.preventDefault();
      // The live field, which a refresh keeps: not the one built with
      // this handler.
      location.hash = nsLink(e.currentTarget.elements.ns.value.trim());
    },
  }, h('label', { for: 'open-ns' }, 'Open a namespace'), input, h('button', { type: 'submit', 'data-key': 'open-ns-go' }, 'Open'));
}

const namespace = {
  title: (r) => r.ns,
  async render(r, ctx) {
    const base = nsPath(r.ns);
    const [eps, recent] = await Promise.all([
      call('GET', base + '/endpoints'),
      call('GET', base + '/outcomes?order=desc&limit=20').catch(() => null),
    ]);
    // The stream's state and last error come from its outbox page, its
    // last hour from the endpoint's own view.
    const [streams, details] = await Promise.all([
      Promise.all(eps.endpoints.map((e) => call('GET', base + '/outbox?limit=1&endpoint=' + enc(e.id)).catch(() => null))),
      Promise.all(eps.endpoints.map((e) => call('GET', base + '/endpoints/' + enc(e.id)).catch((err) => err))),
    ]);
    const list = eps.endpoints.map((e, i) => {
      const o = streams[i];
      const state = !e.enabled ? 'disabled' : o ? o.state : 'none';
      return { e, o, state, detail: details[i] };
    });
    list.sort((a, b) => (failing(b.state) - failing(a.state)) || b.e.backlog.rows - a.e.backlog.rows || a.e.id.localeCompare(b.e.id));
    const rows = list.map(({ e, o, state }) => h('tr', { class: failing(state) ? 'failing' : '', 'data-key': 'ep-' + e.id },
      h('th', { scope: 'row', class: 'id' }, h('a', { href: streamLink(r.ns, e.id), title: e.id }, e.id)),
      h('td', {}, badge(state), e.disabled_reason ? ' ' + e.disabled_reason : '',
        e.disabled_at ? [h('br'), h('span', { class: 'muted' }, 'since '), when(h, e.disabled_at)] : null),
      h('td', { class: 'n' }, num(e.backlog.rows)),
      h('td', { class: 'n' }, bytes(e.backlog.bytes)),
      h('td', {}, when(h, e.oldest_pending_at)),
      h('td', {}, when(h, e.next_attempt_at)),
      h('td', { class: 'wrap' }, lastError(o && o.rows[0] && o.rows[0].last_attempt)),
      h('td', { class: 'n' }, num(e.counters.delivered)),
      h('td', { class: 'n' }, num(e.counters.failed_attempts))));
    const outcomeRows = recent ? recent.outcomes.map((c) => h('tr', { 'data-key': 'rid-' + c.reservation_id },
      h('th', { scope: 'row', class: 'id' }, h('a', { href: outcomeLink(r.ns, c.reservation_id), title: c.reservation_id }, c.reservation_id)),
      h('td', {}, c.kind || '—'),
      h('td', {}, when(h, c.accepted_at)),
      h('td', { class: 'wrap' }, c.endpoints.map((s) => h('span', { class: 'chip' }, s.endpoint + ': ' + s.state))))) : [];
    return h('section', {},
      crumbs(topCrumb(), [r.ns]),
      h('h1', {}, 'Namespace ', h('code', {}, r.ns)),
      endpointCreate(r, ctx),
      table('Endpoints, failing first',
        ['Endpoint', 'State', 'Pending rows', 'Pending bytes', 'Oldest pending', 'Next attempt', 'Last error', 'Delivered', 'Failed attempts'],
        rows, 'This namespace has no endpoint. Register one with PUT ' + base + '/endpoints/{id}.'),
      list.length ? [h('h2', {}, 'Last hour, per minute'),
        h('div', { class: 'charts' }, list.map(({ e, detail }) => detail && detail.per_minute
          ? minuteChart(e.id, detail.per_minute)
          : h('div', { class: 'card' }, h('strong', {}, e.id), ': the chart could not be loaded. It retries with the next refresh.',
            detail instanceof Error ? problemView(detail) : null)))] : null,
      h('h2', {}, 'Recent outcomes'),
      recent ? [table('The newest 20, newest first', ['Reservation id', 'Kind', 'Accepted', 'Endpoints'], outcomeRows,
        'No outcome is retained in this namespace.'),
      h('p', {}, h('a', { href: nsLink(r.ns) + '/outcomes', 'data-key': 'outcome-log' }, 'All outcomes: filter, search and page back'))]
        : h('p', { class: 'empty' }, 'This token may not list outcomes.'));
  },
};

// withRowResult puts the result of a control in one of rows (keyed by
// prefix + an id) under its row, or where its row was if it is gone.
function withRowResult(rows, ids, prefix, cols) {
  if (!result || !result.key.startsWith(prefix)) return rows;
  const node = resultView(result.key, cols);
  const at = ids.indexOf(result.key.slice(prefix.length));
  const out = [...rows];
  out.splice(at >= 0 ? at + 1 : Math.min(result.index, rows.length), 0, node);
  return out;
}

// replayCell is a pending row's Replay, or why there is none: a disabled
// endpoint answers 409 to a replay, and only admin may replay.
function replayCell(r, row, i, e, ctx) {
  if (!e.enabled) return h('td', { class: 'wrap muted' }, 'Not while disabled: enable the endpoint, or Enable and deliver');
  return h('td', {}, h('button', {
    type: 'button', 'data-key': 'replay-' + row.reservation_id, 'aria-label': 'Replay ' + row.reservation_id,
    onclick: () => act('replay:' + row.reservation_id, `Replay ${row.reservation_id} on ${r.id} now, before the rows ahead of it?`, 'Replay',
      () => call('POST', '/v1/admin/namespaces/' + enc(r.ns) + '/endpoints/' + enc(r.id) + '/outcomes/' + enc(row.reservation_id) + '/replay'),
      (res) => `Replayed ${res.reservation_id}: next attempt ${new Date(res.next_attempt_at).toLocaleTimeString()}.`, ctx, { index: i }),
  }, 'Replay'));
}

const stream = {
  title: (r) => r.id + ' · ' + r.ns,
  async render(r, ctx) {
    const g = grants();
    const base = nsPath(r.ns);
    const cursor = r.params.get('cursor');
    // from: the page that starts at an outcome's row, which an outcome's
    // page links to.
    const from = cursor ? null : r.params.get('from');
    const [e, o] = await Promise.all([
      call('GET', base + '/endpoints/' + enc(r.id)),
      // The pending rows need outbox:read; a token without it still sees
      // the endpoint and may enable or disable it.
      g.readOutbox ? call('GET', base + '/outbox?limit=50&endpoint=' + enc(r.id) + (cursor ? '&cursor=' + enc(cursor) : '') +
        (from ? '&from_sequence=' + enc(from) : '')) : null,
    ]);
    const state = !e.enabled ? 'disabled' : o ? o.state : 'none';
    // The row's reservation id heads it and stays put as the table
    // scrolls. A row whose stored outcome cannot be read has no
    // reservation id to link or replay: it shows by its place.
    const head = ['Reservation id', 'Seq', g.admin ? 'Action' : null, 'Kind', 'Attempts', 'Failed attempts, newest first'].filter(Boolean);
    const rows = (o ? o.rows : []).map((row, i) => h('tr', { 'data-key': 'seq-' + row.sequence, class: String(row.sequence) === from ? 'here' : null, 'aria-current': String(row.sequence) === from ? 'true' : null },
      row.reservation_id
        ? h('th', { scope: 'row', class: 'id' }, h('a', { href: outcomeLink(r.ns, row.reservation_id), title: row.reservation_id }, row.reservation_id))
        : h('th', { scope: 'row' }, 'unreadable'),
      h('td', { class: 'n' }, num(row.sequence)),
      !g.admin ? null : row.reservation_id ? replayCell(r, row, i, e, ctx) : h('td', {}, '—'),
      h('td', {}, row.kind || '—'),
      h('td', { class: 'n' }, num(row.attempt_count)),
      h('td', { class: 'wrap' }, attemptList(row))));
    const shown = withRowResult(rows, (o ? o.rows : []).map((row) => row.reservation_id), 'replay:', head.length);
    // Enabling and disabling change only that, through routes of their
    // own: nothing of the endpoint is sent back.
    const toggle = !g.writeEndpoints ? null : h('button', {
      type: 'button', 'data-key': 'toggle',
      onclick: () => act('toggle', e.enabled ? `Disable ${r.id}? Nothing is delivered to it until it is enabled; its rows stay and new ones queue.` : `Enable ${r.id}? Its pending rows are delivered at once.`,
        e.enabled ? 'Disable' : 'Enable',
        () => call('POST', base + '/endpoints/' + enc(r.id) + (e.enabled ? '/disable' : '/enable')),
        (res) => `${res.id} is now ${res.enabled ? 'enabled' : 'disabled'}.`, ctx, { danger: e.enabled }),
    }, e.enabled ? 'Disable endpoint' : 'Enable endpoint');
    const backlog = o ? o.backlog : e.backlog;
    // Every pending row at once, its backoff forgotten; on a disabled
    // endpoint, enabled in the same step.
    const retry = !g.admin || backlog.rows === 0 ? null : h('button', {
      type: 'button', 'data-key': 'retry',
      onclick: () => act('toggle', e.enabled
        ? `Try every pending row of ${r.id} now, forgetting its backoff?`
        : `Enable ${r.id} and deliver its pending rows now?`, e.enabled ? 'Retry now' : 'Enable and deliver',
      () => call('POST', base + '/endpoints/' + enc(r.id) + '/retry' + (e.enabled ? '' : '?enable=true')),
      (res) => `${num(res.pending_rows)} ${res.pending_rows === 1 ? 'row is' : 'rows are'} due now${res.enabled ? '; the endpoint is enabled' : ''}.`, ctx),
    }, e.enabled ? 'Retry every pending row now' : 'Enable and deliver');
    return h('section', {},
      crumbs(topCrumb(), [r.ns, nsLink(r.ns)], [r.id]),
      h('h1', {}, 'Endpoint ', h('code', {}, r.id)),
      h('dl', { class: 'facts' },
        h('dt', {}, 'State'), h('dd', {}, badge(state), e.disabled_reason ? ' ' + disabledWhy(e.disabled_reason) : ''),
        e.disabled_at ? [h('dt', {}, 'Disabled since'), h('dd', {}, when(h, e.disabled_at))] : null,
        e.failing ? [h('dt', {}, 'Failing since'), h('dd', {}, when(h, e.failing.since), ', last ', lastError({ status: e.failing.last_status, error: e.failing.last_error }, false))] : null,
        h('dt', {}, 'URL'), h('dd', {}, h('code', {}, e.url)),
        h('dt', {}, 'Pending'), h('dd', {}, num(backlog.rows) + (backlog.rows === 1 ? ' row, ' : ' rows, ') + bytes(backlog.bytes)),
        h('dt', {}, 'Next attempt'), h('dd', {}, when(h, o ? o.next_attempt_at : e.next_attempt_at)),
        o ? [h('dt', {}, 'Failed fires in a row'), h('dd', {}, num(o.failed_fires))] : null,
        h('dt', {}, 'Delivered'), h('dd', {}, num(e.counters.delivered)),
        h('dt', {}, 'Failed attempts'), h('dd', {}, num(e.counters.failed_attempts))),
      endpointSettings(e),
      e.per_minute ? h('div', { class: 'charts' }, minuteChart(r.id, e.per_minute)) : null,
      toggle || retry ? h('div', { class: 'actions' }, toggle, retry ? ' ' : null, retry) : null,
      resultView('toggle'),
      await endpointManage(r, e, ctx),
      rows.length || !result?.key.startsWith('replay:') ? null : resultView(result.key),
      !o ? h('p', { class: 'empty' }, 'This token may not read the pending rows (that needs the outbox:read scope).')
        : table('Pending rows in delivery order', head, rows.length ? shown : [],
          'Nothing is pending: every outcome for this endpoint was delivered.'),
      o?.next_cursor || cursor || from ? h('nav', { class: 'pager', 'aria-label': 'Pages' },
        cursor || from ? h('a', { href: streamLink(r.ns, r.id), 'data-key': 'stream-first' }, 'First rows') : null,
        o?.next_cursor ? h('a', { href: streamLink(r.ns, r.id) + '?cursor=' + enc(o.next_cursor), 'data-key': 'stream-next' }, 'Next rows') : null) : null,
      await recoverView(r, ctx, g));
  },
};

function isoFromLocal(v) {
  return v ? new Date(v).toISOString() : '';
}

// recoverView is a recovery's progress, and the form that starts one for
// an admin token.
async function recoverView(r, ctx, g) {
  const job = r.params.get('job');
  let progress = null;
  if (job) {
    try {
      const j = await call('GET', nsPath(r.ns) + '/endpoints/' + enc(r.id) + '/recoveries/' + enc(job));
      progress = h('p', { class: 'status' }, `Recovery ${j.id}: ${j.state}, ${num(j.examined)} of at most ${num(j.total)} examined, ${num(j.queued)} queued`,
        j.finished_at ? [', finished ', when(h, j.finished_at)] : '');
    } catch (err) {
      progress = problemView(err);
    }
  }
  const since = h('input', { id: 'rec-since', name: 'since', type: 'datetime-local', required: true, step: 1, 'data-key': 'rec-since' });
  const until = h('input', { id: 'rec-until', name: 'until', type: 'datetime-local', required: true, step: 1, 'data-key': 'rec-until' });
  const form = h('form', {
    class: 'card', 'data-key': 'recover', onsubmit: async (e) => {
      e.preventDefault();
      // The live fields, which a refresh keeps: not the ones built with
      // this handler.
      const f = e.currentTarget.elements;
      const from = f.since.value, to = f.until.value;
      const range = { since: isoFromLocal(from), until: isoFromLocal(to) };
      clearResult();
      try {
        // What the range holds, counted and written nowhere, so that the
        // operator knows what the confirmation starts.
        const q = new URLSearchParams(range).toString();
        const p = await call('GET', nsPath(r.ns) + '/endpoints/' + enc(r.id) + '/recover?' + q);
        const count = (p.partial ? 'at least ' : '') + num(p.delivered) + (p.delivered === 1 && !p.partial ? ' outcome' : ' outcomes');
        if (!(await confirmAction(`Queue again the ${count} ${r.id} was delivered that were accepted from ${from} to ${to}?`, 'Recover'))) return;
        const j = await call('POST', nsPath(r.ns) + '/endpoints/' + enc(r.id) + '/recover', range);
        location.hash = streamLink(r.ns, r.id) + '?job=' + enc(j.id);
      } catch (err) {
        if (err instanceof ProblemError && err.status === 401) return;
        setResult('recover', false, err);
        await ctx.refresh();
        showResult();
      }
    },
  },
  h('h2', {}, 'Recover'),
  h('p', {}, 'Deliver again every retained outcome this endpoint was delivered, accepted in a time range (your time zone).'),
  h('label', { for: 'rec-since' }, 'From'), since,
  h('label', { for: 'rec-until' }, 'Until'), until,
  h('div', { class: 'actions' }, h('button', { type: 'submit', 'data-key': 'rec-go' }, 'Start recovery')),
  resultView('recover'));
  return h('div', {}, progress, g.admin ? form : null);
}

const outcome = {
  title: (r) => r.rid + ' · ' + r.ns,
  async render(r, ctx) {
    const g = grants();
    const v = await call('GET', nsPath(r.ns) + '/outcomes/' + enc(r.rid));
    const stories = v.endpoints.map((s) => h('article', { class: 'card', 'data-key': 'story-' + s.endpoint },
      h('h3', {}, h('a', { href: streamLink(r.ns, s.endpoint) }, s.endpoint), ' ', h('span', { class: 'badge ' + (s.state === 'delivered' ? 'good' : s.state === 'pending' ? 'bad' : '') }, s.state)),
      h('ol', { class: 'story' },
        h('li', {}, 'Accepted ', when(h, v.accepted_at)),
        s.attempts.map((a) => h('li', {}, a.error ? 'Attempt failed ' : 'Attempt answered ', when(h, a.at), ' in ', num(a.duration_ms), ' ms',
          a.status ? ', HTTP ' + a.status : '', a.error && a.error !== 'status' ? ', ' + a.error : '',
          a.response_excerpt ? h('pre', { class: 'excerpt' }, a.response_excerpt) : null)),
        s.attempt_count > s.attempts.length ? h('li', { class: 'muted' }, `${num(s.attempt_count - s.attempts.length)} earlier attempts not kept`) : null,
        s.delivered_at ? h('li', {}, 'Delivered ', when(h, s.delivered_at)) : null,
        s.dropped_at ? h('li', {}, 'Dropped ', when(h, s.dropped_at)) : null),
      s.state === 'delivered' && g.admin ? h('button', {
        type: 'button', 'data-key': 'resend-' + s.endpoint, 'aria-label': 'Resend to ' + s.endpoint,
        onclick: () => act('resend:' + s.endpoint, `Send ${r.rid} to ${s.endpoint} again? The receiver gets it a second time.`, 'Resend',
          () => call('POST', nsPath(r.ns) + '/endpoints/' + enc(s.endpoint) + '/outcomes/' + enc(r.rid) + '/resend'),
          () => `Resent ${r.rid} to ${s.endpoint}.`, ctx),
      }, 'Resend') : s.state === 'pending' ? h('a', { href: streamLink(r.ns, s.endpoint) + '?from=' + v.seq }, g.admin ? 'Pending: replay it from its stream' : 'Pending: see it in its stream') : null,
      resultView('resend:' + s.endpoint)));
    return h('section', {},
      crumbs(topCrumb(), [r.ns, nsLink(r.ns)], [r.rid]),
      h('h1', {}, 'Outcome ', h('code', {}, r.rid)),
      h('dl', { class: 'facts' },
        h('dt', {}, 'Sequence'), h('dd', {}, num(v.seq)),
        h('dt', {}, 'Accepted'), h('dd', {}, when(h, v.accepted_at))),
      h('h2', {}, 'Story per endpoint'),
      stories.length ? h('div', { class: 'stories' }, stories) : h('p', { class: 'empty' }, 'No endpoint existed when this outcome was accepted.'),
      h('h2', {}, 'Body'),
      h('pre', { class: 'body', tabindex: 0, 'aria-label': 'Outcome body' }, JSON.stringify(v.outcome, null, 2)));
  },
};

const missing = {
  title: () => 'Not found',
  live: false,
  async render() {
    const [href, label] = home();
    return h('section', {}, h('h1', {}, 'No such page'), h('p', {}, h('a', { href }, label[0].toUpperCase() + label.slice(1))));
  },
};

// choose is the start of a token that may not list namespaces and is bound
// to none: it asks for a namespace, or says the token can show nothing.
const choose = {
  title: () => 'Open a namespace',
  live: false,
  async render() {
    const g = grants();
    if (!g.readEndpoints) {
      return h('section', {}, h('h1', {}, 'Nothing to show'),
        h('p', {}, 'This token may not read endpoints or the outbox: the console needs the outbox:read scope ',
          '(or endpoints:write, or admin). Log out and sign in with another token.'));
    }
    return h('section', {}, h('h1', {}, 'Open a namespace'),
      h('p', {}, 'This token may not list namespaces: that needs the admin scope. Name the namespace to open.'),
      openNamespace());
  },
};

// failed is a page whose data did not load: the API's problem, and a way
// on that the token may take.
export function failed(r, err) {
  const [href, label] = home();
  return h('section', {}, h('h1', {}, 'Could not load this page'), problemView(err),
    h('p', {}, 'It refreshes by itself; or ', h('a', { href }, label), '.'), grants().ns ? null : openNamespace());
}
for (const p of [namespaces, namespace, stream, outcome]) p.failed = failed;

export const pages = { namespaces, namespace, stream, outcome, missing, choose };
