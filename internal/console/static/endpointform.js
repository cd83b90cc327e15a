// Endpoints managed in place: created from a namespace's page; edited,
// rotated, tested and deleted from the endpoint's own. Every control is
// offered only to a token that may write endpoints (grants().writeEndpoints),
// and each calls the API once, its result shown beside it.
import { h, confirmAction } from './dom.js';
import { call, grants, enc, ProblemError } from './api.js';
import { num, when } from './fmt.js';
import { act, setResult, resultView, showResult, clearResult, problemView, announce } from './pages.js';

const KINDS = ['committed', 'aborted', 'expired', 'read_served'];
const EVENTS = 'relay.*';
const SCHEMES = ['mkit-hook-v2', 'standard-webhooks', 'standard-webhooks-v1a'];
// The API's placeholder for a header value it does not show again.
const REDACTED = '[redacted]';
// A note lasts as long as an action's result does (pages.js).
const NOTE_MS = 20000;

const epPath = (ns, id) => '/v1/namespaces/' + enc(ns) + '/endpoints/' + enc(id);
const nsHash = (ns) => '#/ns/' + enc(ns);
const epHash = (ns, id) => nsHash(ns) + '/endpoints/' + enc(id);

// What this page keeps between its refreshes, dropped when the operator
// leaves the page it belongs to (page is a pageKey):
// - form: the create or edit form on show;
// - secret: a secret or public key relay made, shown until dismissed, as
//   no later answer holds it again;
// - test: the reservation id of the last test sent from the page;
// - note: what a create or delete did, on the page it led to, as the
//   page's own results go with the page they were taken on.
const state = { form: '', secret: null, test: null, note: null };

function pageKey(hash) {
  const parts = hash.replace(/^#/, '').split('?')[0].split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] !== 'ns') return '';
  if (parts.length === 2) return 'ns:' + parts[1];
  if (parts.length === 4 && parts[2] === 'endpoints') return 'ep:' + parts[1] + '/' + parts[3];
  return '';
}
const nsKey = (ns) => 'ns:' + ns;
const epKey = (ns, id) => 'ep:' + ns + '/' + id;

window.addEventListener('hashchange', () => {
  const here = pageKey(location.hash);
  if (state.form && !state.form.startsWith(here + '|')) state.form = '';
  for (const k of ['secret', 'test', 'note']) {
    if (state[k] && state[k].page !== here) state[k] = null;
  }
});

// newSecret is a Standard Webhooks secret made in the browser: 32 random
// bytes. relay generates one only for an endpoint that has none, so a
// rotation brings its own.
function newSecret() {
  const b = crypto.getRandomValues(new Uint8Array(32));
  return 'whsec_' + btoa(String.fromCharCode(...b));
}

// putBody is the endpoint as GET showed it, as a PUT that changes nothing
// of it: the headers shown in full sent again, those shown redacted kept by
// name (keep_headers), as their values are not known here.
function putBody(e) {
  const headers = {};
  const keep = [];
  for (const [n, v] of Object.entries(e.headers || {})) {
    if (v === REDACTED) keep.push(n);
    else headers[n] = v;
  }
  const body = {
    url: e.url, scheme: e.scheme, kinds: e.kinds || [], enabled: e.enabled,
    max_in_flight: e.max_in_flight, timeout_ms: e.timeout_ms, headers,
  };
  if (keep.length) body.keep_headers = keep;
  if (e.rate_limit) body.rate_limit = e.rate_limit;
  return body;
}

// parseHeaders reads the headers field, a header a line as "name: value".
// A value left as the redaction placeholder keeps the stored one.
function parseHeaders(text) {
  const headers = {};
  const keep = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    const at = line.indexOf(':');
    const name = at > 0 ? line.slice(0, at).trim().toLowerCase() : '';
    const value = at > 0 ? line.slice(at + 1).trim() : '';
    if (!name || !value) throw new Error(`Headers, line ${i + 1}: write a header as name: value.`);
    if (name in headers || keep.includes(name)) throw new Error(`Headers, line ${i + 1}: ${name} is named twice.`);
    if (value === REDACTED) keep.push(name);
    else headers[name] = value;
  });
  return { headers, keep };
}

function numberField(f, name, label) {
  const v = f[name].value.trim();
  if (v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new Error(`${label} must be a whole number.`);
  return n;
}

// formBody is the PUT the form's live fields ask for.
function formBody(form, creating) {
  const f = form.elements;
  const { headers, keep } = parseHeaders(f.headers.value);
  const body = {
    url: f.url.value.trim(), scheme: f.scheme.value,
    kinds: Array.from(form.querySelectorAll('input[name=kind]:checked'), (c) => c.value),
    headers,
  };
  if (keep.length) {
    if (creating) throw new Error(`A new endpoint has no stored value to keep: give ${keep[0]} its value.`);
    body.keep_headers = keep;
  }
  const timeout = numberField(f, 'timeout', 'The timeout');
  const inFlight = numberField(f, 'inflight', 'Calls at once');
  const rate = numberField(f, 'rate', 'The rate limit');
  if (timeout !== undefined) body.timeout_ms = timeout;
  if (inFlight !== undefined) body.max_in_flight = inFlight;
  if (rate !== undefined) body.rate_limit = rate;
  if (f.secret.value.trim()) body.secret = f.secret.value.trim();
  if (creating) body.enabled = f.enabled.checked;
  return body;
}

function field(id, label, input, hint) {
  input.setAttribute('id', id);
  input.setAttribute('data-key', id);
  if (hint) input.setAttribute('aria-describedby', id + '-hint');
  return h('div', { class: 'field', 'data-key': 'f-' + id },
    h('label', { for: id }, label), input,
    hint ? h('p', { class: 'hint muted', id: id + '-hint' }, hint) : null);
}

// endpointForm creates an endpoint in namespace ns (e null), or edits e,
// prefilled with it as GET shows it.
function endpointForm(ns, e, ctx) {
  const creating = !e;
  const key = creating ? 'create' : 'edit';
  const kinds = creating ? [] : e.kinds;
  const choices = [...KINDS, EVENTS, ...kinds.filter((k) => !KINDS.includes(k) && k !== EVENTS)];
  const headerText = creating ? '' : Object.entries(e.headers || {}).map(([n, v]) => n + ': ' + v).join('\n');
  const cancel = () => {
    state.form = '';
    clearResult();
    ctx.refresh();
  };
  return h('form', {
    class: 'card endpoint-form', id: 'endpoint-form', 'data-key': 'endpoint-form', 'aria-labelledby': 'ep-form-title', novalidate: true,
    onsubmit: async (ev) => {
      ev.preventDefault();
      // The live form, which a refresh keeps: not the one built with this
      // handler.
      const form = ev.currentTarget;
      clearResult();
      try {
        const id = creating ? form.elements.id.value.trim() : e.id;
        if (!id) throw new Error('Give the endpoint an id.');
        const body = formBody(form, creating);
        if (!creating) {
          // Enabling and disabling have their own controls: the edit
          // leaves the endpoint as it is now, not as the form found it.
          body.enabled = (await call('GET', epPath(ns, id))).enabled;
        }
        const res = await call('PUT', epPath(ns, id), body);
        state.form = '';
        const made = res.secret ? { label: 'Signing secret', value: res.secret } : null;
        if (creating) {
          const page = epKey(ns, id);
          state.secret = made ? { ...made, page, id, once: true } : null;
          state.note = { page, text: `Created ${id}.` };
          location.hash = epHash(ns, id);
          return;
        }
        if (made) state.secret = { ...made, page: epKey(ns, id), id, once: true };
        setResult('endpoint', true, `Saved ${id}.`);
      } catch (err) {
        if (err instanceof ProblemError && err.status === 401) return;
        setResult(key, false, err);
      }
      await ctx.refresh();
      showResult();
    },
  },
  h('h2', { id: 'ep-form-title' }, creating ? 'New endpoint' : 'Edit ' + e.id),
  creating ? field('ep-id', 'Endpoint id', h('input', { name: 'id', required: true, autocomplete: 'off', spellcheck: 'false', maxlength: 63 }),
    'Letters, digits, and . _ : - ; it cannot be changed later.') : null,
  field('ep-url', 'URL', h('input', { name: 'url', type: 'url', required: true, autocomplete: 'off', spellcheck: 'false', value: creating ? '' : e.url })),
  field('ep-scheme', 'Signature scheme', h('select', { name: 'scheme' },
    SCHEMES.map((s) => h('option', { value: s, selected: (creating ? 'mkit-hook-v2' : e.scheme) === s }, s)))),
  field('ep-secret', 'Secret', h('input', { name: 'secret', autocomplete: 'off', spellcheck: 'false', placeholder: 'whsec_…' }),
    creating ? 'standard-webhooks only: the whsec_ secret to sign with; empty, relay makes one and shows it once.'
      : 'standard-webhooks only: a new secret to sign with, the current one still valid beside it; empty keeps it.'),
  h('fieldset', { class: 'kinds', 'data-key': 'ep-kinds' },
    h('legend', {}, 'Kinds'),
    h('p', { class: 'hint muted', id: 'ep-kinds-hint' }, 'None checked takes every outcome kind. Operator events go only where relay.* (or one of them) is checked.'),
    choices.map((k) => h('label', { class: 'check', 'data-key': 'kind-' + k },
      h('input', { type: 'checkbox', name: 'kind', value: k, checked: kinds.includes(k), 'aria-describedby': 'ep-kinds-hint' }), ' ', k))),
  field('ep-headers', 'Headers', h('textarea', { name: 'headers', rows: 3, spellcheck: 'false', autocomplete: 'off' }, headerText),
    'One a line, as name: value. A value shown as ' + REDACTED + ' is kept as stored: replace it to change it, delete its line to remove the header.'),
  h('div', { class: 'numbers', 'data-key': 'ep-numbers' },
    field('ep-timeout', 'Timeout (ms)', h('input', { name: 'timeout', type: 'number', min: 1000, max: 10000, step: 1, inputmode: 'numeric', value: creating ? '' : e.timeout_ms, placeholder: '5000' }),
      '1,000 to 10,000; empty: 5,000.'),
    field('ep-inflight', 'Calls at once', h('input', { name: 'inflight', type: 'number', min: 1, max: 16, step: 1, inputmode: 'numeric', value: creating ? '' : e.max_in_flight, placeholder: '1' }),
      '1 to 16 (max_in_flight); 1 keeps order.'),
    field('ep-rate', 'Rate limit (calls/s)', h('input', { name: 'rate', type: 'number', min: 1, max: 10000, step: 1, inputmode: 'numeric', value: creating || !e.rate_limit ? '' : e.rate_limit }),
      '1 to 10,000; empty: unlimited.')),
  creating ? h('label', { class: 'check', 'data-key': 'ep-enabled' }, h('input', { type: 'checkbox', name: 'enabled', checked: true }), ' Enabled: deliver to it at once') : null,
  h('div', { class: 'actions' },
    h('button', { type: 'submit', 'data-key': 'ep-save' }, creating ? 'Create endpoint' : 'Save changes'),
    h('button', { type: 'button', class: 'secondary', 'data-key': 'ep-cancel', onclick: cancel }, 'Cancel')),
  resultView(key));
}

// secretBox shows a secret relay made, this once, with a way to copy it.
function secretBox() {
  const s = state.secret;
  return h('div', { class: 'card secret', 'data-key': 'secret', role: 'group', 'aria-labelledby': 'secret-title' },
    h('h2', { id: 'secret-title' }, s.label + ' of ' + s.id),
    h('p', {}, s.once ? 'Shown this once: relay shows it nowhere else. Copy it to the receiver now.' : 'Copy it to the receiver now.'),
    h('code', { class: 'secret-value', id: 'secret-value', tabindex: 0 }, s.value),
    h('div', { class: 'actions' },
      h('button', {
        type: 'button', 'data-key': 'secret-copy', onclick: async () => {
          const said = document.getElementById('secret-copied');
          let text = 'Copied.';
          try {
            await navigator.clipboard.writeText(s.value);
          } catch {
            text = 'The browser refused the clipboard: select the text and copy it.';
          }
          if (said) said.textContent = text;
          announce(text, false);
        },
      }, 'Copy'),
      h('button', {
        type: 'button', class: 'secondary', 'data-key': 'secret-done', onclick: () => {
          state.secret = null;
          document.querySelector('[data-key=secret]')?.remove();
        },
      }, 'Done, hide it'),
      h('span', { class: 'muted', id: 'secret-copied', 'data-key': 'secret-copied' })));
}

// testStory is the last test sent from the page: what became of it on the
// endpoint, read again with each refresh.
async function testStory(ns, id) {
  const t = state.test;
  if (!grants().readOutbox) {
    return h('p', { class: 'muted', 'data-key': 'test' }, `Test ${t.rid} queued. This token may not read outcomes (outbox:read) to show its attempts.`);
  }
  let s = null;
  try {
    const v = await call('GET', '/v1/namespaces/' + enc(ns) + '/outcomes/' + enc(t.rid));
    s = v.endpoints.find((x) => x.endpoint === id);
  } catch (err) {
    if (err instanceof ProblemError && err.status === 401) throw err;
    return h('div', { 'data-key': 'test' }, problemView(err, false));
  }
  const attempts = s ? s.attempts : [];
  return h('section', { class: 'card test-story', 'data-key': 'test', 'aria-labelledby': 'test-title' },
    h('h2', { id: 'test-title' }, 'Test outcome'),
    h('p', {}, h('a', { href: nsHash(ns) + '/outcomes/' + enc(t.rid) }, t.rid), ': ',
      h('span', { class: 'badge ' + (s?.state === 'delivered' ? 'good' : s?.state === 'pending' ? '' : 'bad') }, s ? s.state : 'not found')),
    attempts.length ? h('ol', { class: 'story' }, attempts.map((a) => h('li', {},
      a.error ? 'Attempt failed ' : 'Attempt answered ', when(h, a.at), ' in ', num(a.duration_ms), ' ms',
      a.status ? ', HTTP ' + a.status : '', a.error && a.error !== 'status' ? ', ' + a.error : '',
      a.response_excerpt ? h('pre', { class: 'excerpt' }, a.response_excerpt) : null)))
      : h('p', { class: 'muted' }, 'No attempt yet: it shows here when it is made.'));
}

// settle waits, briefly, for the first attempt of the test rid on id, so
// that its result can say how it went; a slow receiver's shows later.
async function settle(ns, id, rid) {
  if (!grants().readOutbox) return null;
  for (let i = 0; i < 12; i++) {
    const v = await call('GET', '/v1/namespaces/' + enc(ns) + '/outcomes/' + enc(rid)).catch(() => null);
    const s = v?.endpoints.find((x) => x.endpoint === id);
    if (s && (s.state !== 'pending' || s.attempts.length)) return s;
    await new Promise((r) => setTimeout(r, 250));
  }
  return null;
}

function attemptWords(s) {
  if (!grants().readOutbox) return 'queued';
  const a = s?.attempts[s.attempts.length - 1];
  if (!a) return 'its attempt shows below when it is made';
  return (a.error ? 'the attempt failed' : 'the attempt was answered') + (a.status ? ' HTTP ' + a.status : '') + ' in ' + num(a.duration_ms) + ' ms';
}

// noteView is what a create or delete did, on the page it led to, told to
// screen readers once.
function noteView(page) {
  const n = state.note?.page === page ? state.note : null;
  if (!n) return null;
  if (!n.told) {
    n.told = true;
    announce(n.text, false);
    // In view once the page that holds it is shown.
    setTimeout(() => document.querySelector('[data-note]')?.scrollIntoView({ block: 'center' }));
    setTimeout(() => {
      if (state.note !== n) return;
      state.note = null;
      document.querySelector('[data-note]')?.remove();
    }, NOTE_MS);
  }
  return h('p', { class: 'ok', 'data-key': 'note', 'data-note': '' }, n.text);
}

// endpointManage is the stream page's controls of endpoint e: edit, rotate,
// test and delete, and what they left to show. Empty for a token that may
// not write endpoints.
export async function endpointManage(r, e, ctx) {
  const g = grants();
  if (!g.writeEndpoints) return null;
  const page = epKey(r.ns, r.id);
  const editing = state.form === page + '|edit';
  const path = epPath(r.ns, r.id);
  const rotate = e.scheme === 'standard-webhooks' ? ['Rotate secret', 'secret'] : e.scheme === 'standard-webhooks-v1a' ? ['Rotate key pair', 'key pair'] : null;
  const buttons = h('div', { class: 'actions', 'data-key': 'manage' },
    h('button', {
      type: 'button', 'data-key': 'edit', 'aria-expanded': editing ? 'true' : 'false', 'aria-controls': editing ? 'endpoint-form' : null,
      onclick: async () => {
        clearResult();
        state.note = null;
        state.form = editing ? '' : page + '|edit';
        await ctx.refresh();
        if (state.form) document.getElementById('ep-url')?.focus();
      },
    }, 'Edit endpoint'),
    rotate ? h('button', {
      type: 'button', 'data-key': 'rotate',
      onclick: () => (state.note = null, act('endpoint', rotate[1] === 'secret'
        ? `Rotate the signing secret of ${r.id}? relay signs with a new secret first and the current one beside it until the next rotation; the one before it stops. The new secret is shown once.`
        : `Rotate the key pair of ${r.id}? relay signs with a new pair first and the current one beside it until the next rotation. Give receivers the new public key.`,
      'Rotate', async () => {
        const now = await call('GET', path);
        const body = putBody(now);
        const secret = rotate[1] === 'secret' ? newSecret() : '';
        if (secret) body.secret = secret;
        else body.rotate_key = true;
        const res = await call('PUT', path, body);
        state.secret = secret
          ? { label: 'New signing secret', value: secret, page, id: r.id, once: true }
          : { label: 'New public key', value: res.public_key, page, id: r.id };
        return res;
      }, () => `Rotated the ${rotate[1]} of ${r.id}.`, ctx)),
    }, rotate[0]) : null,
    e.enabled ? h('button', {
      type: 'button', 'data-key': 'test',
      onclick: () => (state.note = null, act('endpoint', `Send a test outcome to ${r.id}? relay delivers an endpoint.test event, signed, to ${r.id} alone.`, 'Send test', async () => {
        const res = await call('POST', path + '/test');
        state.test = { rid: res.reservation_id, page };
        return { res, s: await settle(r.ns, r.id, res.reservation_id) };
      }, ({ res, s }) => `Sent test ${res.reservation_id}: ${attemptWords(s)}.`, ctx)),
    }, 'Send a test outcome') : null,
    h('button', {
      type: 'button', 'data-key': 'delete',
      onclick: async () => {
        clearResult();
        state.note = null;
        let rows = e.backlog.rows;
        try {
          rows = (await call('GET', path)).backlog.rows;
        } catch (err) {
          if (err instanceof ProblemError && err.status === 401) return;
        }
        const drop = rows === 0 ? 'It has no pending row.' : `Its ${num(rows)} pending ${rows === 1 ? 'row is' : 'rows are'} dropped and never delivered.`;
        if (!(await confirmAction(`Delete ${r.id}? ${drop} This cannot be undone.`, 'Delete', { danger: true }))) return;
        try {
          const res = await call('DELETE', path + '?force=true');
          const n = res.dropped_rows;
          state.note = { page: nsKey(r.ns), text: `Deleted ${r.id}: ${num(n)} pending ${n === 1 ? 'row' : 'rows'} dropped.` };
          location.hash = nsHash(r.ns);
        } catch (err) {
          if (err instanceof ProblemError && err.status === 401) return;
          setResult('endpoint', false, err);
          await ctx.refresh();
          showResult();
        }
      },
    }, 'Delete endpoint'));
  return h('div', { 'data-key': 'endpoint-manage' },
    noteView(page),
    buttons,
    resultView('endpoint'),
    state.secret?.page === page ? secretBox() : null,
    editing ? endpointForm(r.ns, e, ctx) : null,
    state.test?.page === page ? await testStory(r.ns, r.id) : null);
}

// endpointCreate is the namespace page's way to add an endpoint, and what
// the last delete from its endpoint's page dropped. Empty for a token that
// may not write endpoints.
export function endpointCreate(r, ctx) {
  if (!grants().writeEndpoints) return null;
  const page = nsKey(r.ns);
  const creating = state.form === page + '|create';
  return h('div', { 'data-key': 'endpoint-create' },
    noteView(page),
    h('div', { class: 'actions', 'data-key': 'create' },
      h('button', {
        type: 'button', 'data-key': 'new-endpoint', 'aria-expanded': creating ? 'true' : 'false', 'aria-controls': creating ? 'endpoint-form' : null,
        onclick: async () => {
          clearResult();
          state.note = null;
          state.form = creating ? '' : page + '|create';
          await ctx.refresh();
          if (state.form) document.getElementById('ep-id')?.focus();
        },
      }, 'New endpoint')),
    creating ? endpointForm(r.ns, null, ctx) : null);
}

// endpointSettings is what the endpoint is configured with, as GET shows
// it to any token that may read it: what an edit would change.
export function endpointSettings(e) {
  const headers = Object.entries(e.headers || {});
  const t = e.throttle;
  return h('dl', { class: 'facts settings', 'aria-label': 'Settings', 'data-key': 'settings' },
    h('dt', {}, 'Scheme'), h('dd', {}, e.scheme),
    e.public_key ? [h('dt', {}, 'Public key'), h('dd', {}, h('code', {}, e.public_key))] : null,
    h('dt', {}, 'Kinds'), h('dd', {}, e.kinds.length ? e.kinds.join(', ') : 'every outcome kind'),
    h('dt', {}, 'Headers'), h('dd', {}, headers.length ? headers.map(([n, v], i) => [i ? h('br') : null, h('code', {}, n + ': ' + v)]) : 'none'),
    h('dt', {}, 'Timeout'), h('dd', {}, num(e.timeout_ms) + ' ms'),
    h('dt', {}, 'Calls at once'), h('dd', {}, num(e.max_in_flight)),
    h('dt', {}, 'Rate limit'), h('dd', {}, e.rate_limit ? num(e.rate_limit) + ' calls/s' : 'unlimited'),
    t ? [h('dt', {}, 'Throttled'), h('dd', {}, `to ${num(t.max_in_flight)} at once` + (t.rate_limit ? `, ${t.rate_limit} calls/s` : '') + ` (${t.reason}) since `, when(h, t.since))] : null);
}
