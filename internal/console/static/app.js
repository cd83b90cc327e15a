// The console's entry: auth, the fragment router and the refresh loop.
import { h, morph } from './dom.js';
import * as api from './api.js';
import { pages as pageList, problemView, clearResult } from './pages.js';
import { outcomeLog } from './outcomelog.js';
import { clockTime } from './fmt.js';

const pages = { ...pageList, outcomeLog };
const REFRESH_MS = 5000;
const HOLD_CHECK_MS = 1000;
const main = document.getElementById('main');
let timer = 0;
let expiry = 0;
let generation = 0;

// route reads #/path?query into a page and its parameters.
function route() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, query = ''] = raw.split('?');
  const params = new URLSearchParams(query);
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return { page: 'namespaces', params };
  if (parts[0] === 'ns' && parts.length === 2) return { page: 'namespace', ns: parts[1], params };
  if (parts[0] === 'ns' && parts.length === 3 && parts[2] === 'outcomes') return { page: 'outcomeLog', ns: parts[1], params };
  if (parts[0] === 'ns' && parts.length === 4 && parts[2] === 'endpoints') {
    return { page: 'stream', ns: parts[1], id: parts[3], params };
  }
  if (parts[0] === 'ns' && parts.length === 4 && parts[2] === 'outcomes') {
    return { page: 'outcome', ns: parts[1], rid: parts[3], params };
  }
  return { page: 'missing', params };
}

function login(message) {
  clearTimeout(timer);
  clearTimeout(expiry);
  generation++;
  view = null;
  document.getElementById('search').hidden = true;
  document.getElementById('logout').hidden = true;
  document.querySelector('.bar .brand').setAttribute('href', '#/');
  document.title = 'Sign in · relay console';
  const field = h('textarea', { id: 'token', name: 'token', rows: 4, required: true, autocomplete: 'off', spellcheck: 'false' });
  const form = h('form', {
    class: 'card', onsubmit: (e) => {
      e.preventDefault();
      api.setToken(field.value);
      if (!location.hash.startsWith('#/')) location.hash = '#/';
      show();
    },
  },
  h('h1', {}, 'Sign in'),
  message ? h('p', { class: 'problem', role: 'alert' }, message) : null,
  h('p', {}, 'Paste an API token. `relay serve` prints a console link with its development token; ',
    '`relay token --console` prints one for a deployment. The token stays in this tab only.'),
  h('label', { for: 'token' }, 'API token'), field,
  h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Open the console')));
  main.replaceChildren(form);
  field.focus();
}

// view is the page on show: its route, its parts and how fresh it is.
let view = null;

// holdReason says why a refresh would now disturb the operator, or ''.
// Nothing is refreshed while a dialog asks, while text is selected (to be
// copied), or while a form of the page holds focus or input.
function holdReason() {
  if (document.querySelector('dialog[open]')) return 'while a dialog is open';
  const sel = document.getSelection();
  if (sel && !sel.isCollapsed && sel.toString().trim() !== '') return 'while text is selected';
  for (const f of main.querySelectorAll('form')) {
    if (f.contains(document.activeElement)) return 'while you fill in a form';
    for (const el of f.elements) {
      if (el.type === 'submit' || el.type === 'button') continue;
      // A date half typed has no value yet, but is input.
      if (edited(el) || el.validity?.badInput) return 'while a form holds your input';
    }
  }
  return '';
}

// edited reports whether the operator changed a field from what the page
// put in it: empty for most, the applied filter for a filter's.
function edited(el) {
  if (el.tagName === 'SELECT') {
    const shown = Array.from(el.options).find((o) => o.defaultSelected) || el.options[0];
    return el.value !== (shown ? shown.value : '');
  }
  if (el.type === 'checkbox' || el.type === 'radio') return el.checked !== el.defaultChecked;
  return el.value !== el.defaultValue;
}

// paint says when the page's figures were read and whether it refreshes.
function paint(v) {
  if (!v.readAt && !v.error) return;
  const live = v.page.live !== false;
  v.freshText.textContent = [
    v.readAt ? 'Updated ' + clockTime(v.readAt) : 'Not loaded',
    !live ? null : v.hold ? 'paused ' + v.hold : `refreshes every ${(v.page.refreshMs || REFRESH_MS) / 1000} s`,
    // A page not read at all says why itself.
    v.error && live && v.readAt ? `the last read failed (${v.error}): it is tried again` : null,
  ].filter(Boolean).join(' · ');
  v.fresh.dataset.readAt = v.readAt ? String(v.readAt.getTime()) : '';
  v.fresh.dataset.held = v.hold;
}

function schedule(v, ms) {
  clearTimeout(timer);
  if (v.page.live !== false) timer = setTimeout(() => refresh(v, 'timer'), ms);
}

// refresh reads the page again and morphs it in place, unless the
// operator is at work on it (why 'timer' or 'hook'): then it waits and
// looks again a second later. It answers 'refreshed', 'held', or 'stale'
// when the operator moved on meanwhile.
async function refresh(v, why) {
  if (v.gen !== generation) return 'stale';
  if (why === 'timer' || why === 'hook') {
    v.hold = holdReason();
    if (v.hold) {
      paint(v);
      schedule(v, HOLD_CHECK_MS);
      return 'held';
    }
  }
  clearTimeout(timer);
  const mine = ++v.started;
  let node = null;
  let error = '';
  try {
    node = await v.page.render(v.r, { refresh: () => refresh(v, 'action') });
  } catch (err) {
    if (err instanceof api.ProblemError && err.status === 401) return 'stale';
    // A page once read keeps its figures when a refresh fails, and says so.
    error = err.message;
    if (!v.readAt) node = v.page.failed ? v.page.failed(v.r, err) : problemView(err);
  }
  if (v.gen !== generation || mine < v.applied) return 'stale';
  v.applied = mine;
  v.error = error;
  if (node) {
    document.title = v.page.title(v.r) + ' · relay console';
    if (why === 'first') {
      v.body.replaceChildren(node);
      main.replaceChildren(v.fresh, v.body);
      main.focus({ preventScroll: true });
    } else {
      morph(v.body, h('div', { class: 'page' }, node));
    }
    if (!error) v.readAt = new Date();
  }
  v.hold = '';
  paint(v);
  schedule(v, v.page.refreshMs || REFRESH_MS);
  return 'refreshed';
}

// watchExpiry signs out when the token's exp passes, saying so, rather
// than at the operator's next click, which relay would refuse. It answers
// whether the token has lapsed already.
function watchExpiry() {
  clearTimeout(expiry);
  const exp = Number(api.claims().exp);
  if (!exp) return false;
  const left = exp * 1000 - Date.now();
  if (left <= 0) {
    api.dropToken();
    login(`The token expired at ${clockTime(new Date(exp * 1000))}. Ask for a new link, or paste another token.`);
    return true;
  }
  // setTimeout takes at most 2^31-1 ms; a longer wait looks again then.
  expiry = setTimeout(watchExpiry, Math.min(left, 2 ** 31 - 1));
  return false;
}

// show renders the current route, and again every few seconds while the
// page stays the same.
async function show() {
  clearTimeout(timer);
  clearResult();
  if (!api.token()) return login();
  if (watchExpiry()) return;
  const g = api.grants();
  // Finding an outcome needs outbox:read; a bound token finds it in its
  // own namespace, which it need not name.
  document.getElementById('search').hidden = !g.readOutbox;
  document.getElementById('logout').hidden = false;
  const searchNs = document.getElementById('search-ns');
  searchNs.hidden = searchNs.labels[0].hidden = Boolean(g.ns);
  searchNs.required = !g.ns;
  if (g.ns) searchNs.value = g.ns;
  // A bound token's start is its namespace: its links lead nowhere else.
  document.querySelector('.bar .brand').setAttribute('href', g.ns ? '#/ns/' + encodeURIComponent(g.ns) : '#/');
  const r = route();
  // The start page lists namespaces; a token that may not opens where it can.
  const page = pages[r.page === 'namespaces' && !g.listNamespaces && !g.ns ? 'choose' : r.page];
  const freshText = h('span', {});
  const v = {
    gen: ++generation, r, page, started: 0, applied: 0, readAt: null, hold: '', error: '', freshText,
    body: h('div', { class: 'page' }),
  };
  v.fresh = h('div', { class: 'freshness muted', id: 'freshness' }, freshText,
    page.live === false ? null : h('button', { type: 'button', class: 'link', onclick: () => refresh(v, 'action') }, 'Refresh now'));
  view = v;
  await refresh(v, 'first');
}

// The paused note follows the operator at once, not at the next look.
for (const type of ['selectionchange', 'focusin', 'focusout', 'input', 'close']) {
  document.addEventListener(type, () => {
    if (!view || !view.readAt) return;
    const hold = holdReason();
    if (hold !== view.hold && (hold || view.hold)) {
      view.hold = hold;
      paint(view);
    }
  }, true);
}

// relayConsole.refresh runs the page's refresh as its timer would, for the
// browser test; it answers 'refreshed', 'held' or 'stale'.
window.relayConsole = { refresh: () => (view ? refresh(view, 'hook') : Promise.resolve('stale')) };

api.whenUnauthorized((p) => login('The token was refused' + (p.detail ? ': ' + p.detail : '') + '. Paste a valid one.'));

document.getElementById('logout').addEventListener('click', () => {
  api.dropToken();
  history.replaceState(null, '', location.pathname + '#/');
  login('Logged out.');
});

document.getElementById('search').addEventListener('submit', (e) => {
  e.preventDefault();
  const ns = api.grants().ns || document.getElementById('search-ns').value.trim();
  const rid = document.getElementById('search-rid').value.trim();
  location.hash = '#/ns/' + encodeURIComponent(ns) + '/outcomes/' + encodeURIComponent(rid);
});

window.addEventListener('hashchange', () => {
  if (api.takeFragmentToken()) return show();
  show();
});
document.getElementById('skip').addEventListener('click', (e) => {
  e.preventDefault();
  main.focus();
});

api.takeFragmentToken();
show();
