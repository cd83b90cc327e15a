// h builds an element: h('a', {href: '#/'}, 'text', child). Text is always
// set as text, never parsed as HTML, so API data cannot inject markup.
// Handlers are kept on the element (_on) behind one listener per event, so
// that morph can give a kept element the handlers of its newer render.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) on(el, k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function dispatch(e) {
  const f = this._on && this._on[e.type];
  if (f) return f.call(this, e);
}

function on(el, type, f) {
  el._on = el._on || {};
  el._on[type] = f;
  el.addEventListener(type, dispatch);
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

const key = (n) => (n.nodeType === Node.ELEMENT_NODE ? n.getAttribute('data-key') : null);

function alike(a, b) {
  if (a.nodeType !== b.nodeType) return false;
  if (a.nodeType !== Node.ELEMENT_NODE) return true;
  return a.tagName === b.tagName && key(a) === key(b) && a.getAttribute('type') === b.getAttribute('type');
}

// morph makes the live element from look like to, which it consumes,
// changing only what differs: the elements kept keep what the operator
// did to them (a field's value, a box's scroll, focus, a selection in an
// unchanged text). Children with a data-key are matched by it, the others
// by their place.
export function morph(from, to) {
  if (from.nodeType !== Node.ELEMENT_NODE) {
    if (from.data !== to.data) from.data = to.data;
    return;
  }
  for (const a of Array.from(from.attributes)) {
    if (!to.hasAttribute(a.name)) from.removeAttribute(a.name);
  }
  for (const a of Array.from(to.attributes)) {
    if (from.getAttribute(a.name) !== a.value) from.setAttribute(a.name, a.value);
  }
  if (to._on) {
    for (const type of Object.keys(to._on)) {
      if (!from._on || !(type in from._on)) from.addEventListener(type, dispatch);
    }
  }
  from._on = to._on;
  const keyed = new Map();
  for (const c of from.childNodes) {
    if (key(c) !== null) keyed.set(key(c), c);
  }
  let cursor = from.firstChild;
  for (const next of Array.from(to.childNodes)) {
    let match = null;
    const k = key(next);
    if (k !== null) {
      const old = keyed.get(k);
      if (old && alike(old, next)) match = old;
      keyed.delete(k);
    } else if (cursor && key(cursor) === null && alike(cursor, next)) {
      match = cursor;
    }
    if (!match) {
      from.insertBefore(next, cursor);
      continue;
    }
    if (match === cursor) cursor = cursor.nextSibling;
    else from.insertBefore(match, cursor);
    morph(match, next);
  }
  // What is left from cursor on was not matched: every matched or new
  // node now stands before it.
  while (cursor) {
    const n = cursor.nextSibling;
    from.removeChild(cursor);
    cursor = n;
  }
}

// confirmAction asks in the page's dialog; resolves true on Confirm. Only
// an action that stops or removes something has a red (danger) button.
export function confirmAction(text, okLabel, { danger = false } = {}) {
  const dlg = document.getElementById('confirm');
  const ok = document.getElementById('confirm-ok');
  document.getElementById('confirm-text').textContent = text;
  ok.textContent = okLabel;
  ok.classList.toggle('danger', danger);
  dlg.returnValue = '';
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
    dlg.showModal();
  });
}

const SVG_NS = 'http://www.w3.org/2000/svg';

// s builds an SVG element as h builds an HTML one: attributes as
// attributes (never style, which the CSP refuses inline), text as text.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}
