// The console's entry: auth, the fragment router and the refresh loop.
import { h } from './dom.js';
import * as api from './api.js';
import { pages, problemView } from './pages.js';

const REFRESH_MS = 5000;
const main = document.getElementById('main');
let timer = 0;
let generation = 0;

// route reads #/path?query into a page and its parameters.
function route() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, query = ''] = raw.split('?');
  const params = new URLSearchParams(query);
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return { page: 'namespaces', params };
  if (parts[0] === 'ns' && parts.length === 2) return { page: 'namespace', ns: parts[1], params };
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
  generation++;
  document.getElementById('search').hidden = true;
  document.getElementById('logout').hidden = true;
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

// show renders the current route, and again every few seconds while the
// page stays the same.
async function show() {
  clearTimeout(timer);
  if (!api.token()) return login();
  document.getElementById('search').hidden = false;
  document.getElementById('logout').hidden = false;
  const ns = api.claims().ns;
  const searchNs = document.getElementById('search-ns');
  if (ns && !searchNs.value) searchNs.value = ns;
  const r = route();
  const page = pages[r.page];
  const gen = ++generation;
  const refresh = async (first) => {
    // A refresh waits while the operator is answering a confirmation.
    if (!first && document.getElementById('confirm').open) {
      timer = setTimeout(refresh, page.refreshMs || REFRESH_MS);
      return;
    }
    let node;
    try {
      node = await page.render(r, { refresh: () => refresh(false) });
    } catch (err) {
      if (err instanceof api.ProblemError && err.status === 401) return;
      node = page.failed ? page.failed(r, err) : problemView(err);
    }
    if (gen !== generation) return; // the operator moved on meanwhile
    document.title = page.title(r) + ' · relay console';
    swap(node);
    if (first) main.focus({ preventScroll: true });
    clearTimeout(timer);
    if (page.live !== false) timer = setTimeout(refresh, page.refreshMs || REFRESH_MS);
  };
  await refresh(true);
}

// swap replaces the page, keeping focus on the control that had it.
function swap(node) {
  const key = document.activeElement?.dataset?.key;
  main.replaceChildren(node);
  if (key) main.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
}

api.whenUnauthorized((p) => login('The token was refused' + (p.detail ? ': ' + p.detail : '') + '. Paste a valid one.'));

document.getElementById('logout').addEventListener('click', () => {
  api.dropToken();
  history.replaceState(null, '', location.pathname + '#/');
  login('Logged out.');
});

document.getElementById('search').addEventListener('submit', (e) => {
  e.preventDefault();
  const ns = document.getElementById('search-ns').value.trim();
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
