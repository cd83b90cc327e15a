// The outcome log of a namespace: newest first, a page at a time either
// way, filtered by state, endpoint, kind, acceptance time and the start of
// the reservation id. The filters and the page live in the address, so a
// refresh reads the same page and a link shares it.
import { h } from './dom.js';
import { call, enc, ProblemError } from './api.js';
import { when } from './fmt.js';
import { table, crumbs, topCrumb, failed, problemView, nsPath, nsLink, streamLink, outcomeLink } from './pages.js';

const PAGE = 25;
const FILTERS = ['state', 'endpoint', 'kind', 'since', 'until', 'rid_prefix'];
const STATES = ['pending', 'delivered', 'dropped', 'filtered'];
const KINDS = ['committed', 'aborted', 'expired', 'read_served'];

// logLink is the log of ns with the filters of params (and a cursor).
export function logLink(ns, params) {
  const q = new URLSearchParams();
  for (const k of [...FILTERS, 'cursor']) {
    const v = params && params.get(k);
    if (v) q.set(k, v);
  }
  const s = q.toString();
  return nsLink(ns) + '/outcomes' + (s ? '?' + s : '');
}

// pendingLink is where an outcome pending on the stream of id waits: the
// stream's page that starts at its sequence number.
export const pendingLink = (ns, id, seq) => streamLink(ns, id) + '?from=' + enc(String(seq));

// localValue is an RFC 3339 time as a datetime-local field holds it, in
// the viewer's zone and normalised as the browser keeps it (no seconds
// when they are 0), so that a field showing the applied filter does not
// count as input that holds the refresh.
function localValue(iso) {
  const d = iso ? new Date(iso) : null;
  if (!d || Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  const s = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  return d.getSeconds() ? s + ':' + p(d.getSeconds()) : s;
}

function select(id, name, label, options, value) {
  return [h('label', { for: id }, label),
    h('select', { id, name, 'data-key': id },
      h('option', { value: '', selected: !value }, 'any'),
      options.map((o) => h('option', { value: o, selected: o === value }, o.replace('_', ' '))))];
}

function filterForm(r, endpoints) {
  const p = r.params;
  const field = (id, name, label, attrs) => [h('label', { for: id }, label),
    h('input', { id, name, 'data-key': id, autocomplete: 'off', spellcheck: 'false', ...attrs })];
  return h('form', {
    class: 'card filters', role: 'search', 'aria-label': 'Filter the outcomes', 'data-key': 'log-filters',
    onsubmit: (e) => {
      e.preventDefault();
      // The live fields, which a refresh keeps: not the ones built with
      // this handler.
      const f = e.currentTarget.elements;
      const q = new URLSearchParams();
      for (const k of ['state', 'endpoint', 'kind']) if (f[k].value) q.set(k, f[k].value);
      const prefix = f.rid_prefix.value.trim();
      if (prefix) q.set('rid_prefix', prefix);
      for (const k of ['since', 'until']) if (f[k].value) q.set(k, new Date(f[k].value).toISOString());
      location.hash = logLink(r.ns, q);
    },
  },
  h('div', { class: 'grid' },
    h('div', {}, select('log-state', 'state', 'State', STATES, p.get('state'))),
    h('div', {}, select('log-endpoint', 'endpoint', 'Endpoint', endpoints, p.get('endpoint'))),
    h('div', {}, select('log-kind', 'kind', 'Kind', KINDS, p.get('kind'))),
    h('div', {}, field('log-rid', 'rid_prefix', 'Reservation id starts with',
      { value: p.get('rid_prefix') || '', pattern: '[A-Za-z0-9._:\\-]{1,128}', maxlength: 128 })),
    h('div', {}, field('log-since', 'since', 'Accepted from', { type: 'datetime-local', step: 1, value: localValue(p.get('since')) })),
    h('div', {}, field('log-until', 'until', 'Accepted before', { type: 'datetime-local', step: 1, value: localValue(p.get('until')) }))),
  h('p', { class: 'muted' }, 'Times are in your time zone. A state applies to the endpoint chosen, or to any endpoint.'),
  h('div', { class: 'actions' },
    h('button', { type: 'submit', 'data-key': 'log-apply' }, 'Apply filters'),
    FILTERS.some((k) => p.get(k)) ? h('a', { href: logLink(r.ns, null), 'data-key': 'log-clear' }, 'Clear filters') : null));
}

// stateChip is an outcome's state on one endpoint; a pending one leads to
// its place in its stream.
function stateChip(ns, o, s) {
  const text = s.endpoint + ': ' + s.state;
  if (s.state !== 'pending') return h('span', { class: 'chip' }, text);
  return h('a', { class: 'chip', href: pendingLink(ns, s.endpoint, o.seq), 'aria-label': `${text}, its place in the stream of ${s.endpoint}` }, text);
}

export const outcomeLog = {
  title: (r) => 'Outcomes · ' + r.ns,
  async render(r) {
    const base = nsPath(r.ns);
    const q = new URLSearchParams({ order: 'desc', limit: String(PAGE) });
    for (const k of [...FILTERS, 'cursor']) if (r.params.get(k)) q.set(k, r.params.get(k));
    const [eps, page] = await Promise.all([
      call('GET', base + '/endpoints').catch(() => ({ endpoints: [] })),
      // A filter the API refuses is shown with the form, to be mended.
      call('GET', base + '/outcomes?' + q).catch((err) => {
        if (err instanceof ProblemError && (err.status === 400 || err.status === 404)) return err;
        throw err;
      }),
    ]);
    const refused = page instanceof ProblemError ? page : null;
    const list = refused ? [] : page.outcomes;
    const filtered = FILTERS.some((k) => r.params.get(k));
    const rows = list.map((o) => h('tr', { 'data-key': 'rid-' + o.reservation_id },
      h('th', { scope: 'row', class: 'id' }, h('a', { href: outcomeLink(r.ns, o.reservation_id), title: o.reservation_id }, o.reservation_id)),
      h('td', {}, o.kind ? o.kind.replace('_', ' ') : '—'),
      h('td', {}, when(h, o.accepted_at)),
      h('td', { class: 'wrap' }, o.endpoints.length ? o.endpoints.map((s) => stateChip(r.ns, o, s)) : h('span', { class: 'muted' }, 'no endpoint'))));
    const at = (cursor) => {
      const p = new URLSearchParams(r.params);
      p.set('cursor', cursor);
      return logLink(r.ns, p);
    };
    const more = !refused && page.next_cursor;
    const empty = !filtered && !r.params.get('cursor') ? 'No outcome is retained in this namespace.'
      : 'No outcome on this page matches' + (more ? '; a page looks at 200 outcomes at most, and older ones may: see Older.' : '.');
    // data-log names the page as read: the address it answers.
    return h('section', { 'data-log': logLink(r.ns, r.params) },
      crumbs(topCrumb(), [r.ns, nsLink(r.ns)], ['Outcomes']),
      h('h1', {}, 'Outcomes of ', h('code', {}, r.ns)),
      filterForm(r, eps.endpoints.map((e) => e.id)),
      refused ? problemView(refused) : null,
      refused ? null : table('Outcomes, newest first', ['Reservation id', 'Kind', 'Accepted', 'State per endpoint'], rows, empty),
      refused ? null : h('nav', { class: 'pager', 'aria-label': 'Pages of outcomes' },
        r.params.get('cursor') ? h('a', { href: logLink(r.ns, new URLSearchParams([...r.params].filter(([k]) => k !== 'cursor'))), 'data-key': 'log-newest' }, 'Newest') : null,
        page.prev_cursor ? h('a', { href: at(page.prev_cursor), rel: 'prev', 'data-key': 'log-newer' }, 'Newer') : null,
        page.next_cursor ? h('a', { href: at(page.next_cursor), rel: 'next', 'data-key': 'log-older' }, 'Older') : null,
        h('span', { class: 'muted' }, `up to ${PAGE} a page`)));
  },
  failed,
};
