// The console's only credential is the API's bearer token, kept in this
// tab's sessionStorage: it goes to no cookie, no server log and no other tab.
const KEY = 'relay.token';

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(t) {
  sessionStorage.setItem(KEY, t.trim());
}

export function dropToken() {
  sessionStorage.removeItem(KEY);
}

// takeFragmentToken moves a #token=... from the address bar into
// sessionStorage and out of the history, so it is not bookmarked or shared.
export function takeFragmentToken() {
  const m = /^#token=([^&]+)/.exec(location.hash);
  if (!m) return false;
  setToken(decodeURIComponent(m[1]));
  history.replaceState(null, '', location.pathname + location.search + '#/');
  return true;
}

// ProblemError is an API refusal, with its RFC 9457 problem.
export class ProblemError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || 'HTTP ' + status);
    this.status = status;
    this.problem = problem;
  }
}

let onUnauthorized = () => {};
export function whenUnauthorized(f) {
  onUnauthorized = f;
}

// call sends one API request; it throws a ProblemError on refusal and
// drops the token on a 401, which means it expired or never was valid.
export async function call(method, path, body) {
  const headers = { Authorization: 'Bearer ' + token(), Accept: 'application/json' };
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const problem = data && typeof data === 'object' ? data : { title: res.statusText };
    if (res.status === 401) {
      dropToken();
      onUnauthorized(problem);
    }
    throw new ProblemError(res.status, problem);
  }
  return data;
}

export const enc = encodeURIComponent;

// claims are the token's own, decoded and not verified: they only choose
// what the console offers. The API checks the signature and the scope of
// every call, so a forged claim shows a control whose call is refused.
export function claims() {
  try {
    const part = token().split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(decodeURIComponent(Array.from(atob(part), (c) => '%' + c.charCodeAt(0).toString(16).padStart(2, '0')).join('')));
  } catch {
    return {};
  }
}

// grants says what the token may do, read from its scope and ns claims as
// the API reads them (internal/httpapi's auth.go): scopes separated by
// spaces, admin implying every other, and a token bound to a namespace
// allowed nothing on another, listing namespaces included.
export function grants() {
  const c = claims();
  const scopes = new Set(typeof c.scope === 'string' ? c.scope.split(' ').filter(Boolean) : []);
  const ns = typeof c.ns === 'string' && c.ns !== '' ? c.ns : '';
  const can = (scope) => scopes.has('admin') || scopes.has(scope);
  return {
    ns,
    can,
    // GET /v1/namespaces needs admin; a bound token sees its namespace only.
    listNamespaces: can('admin') && !ns,
    // GET .../outbox, .../outcomes and .../outcomes/{rid}.
    readOutbox: can('outbox:read'),
    // GET .../endpoints and .../endpoints/{id}.
    readEndpoints: can('outbox:read') || can('endpoints:write'),
    // PUT .../endpoints/{id}: Enable and Disable.
    writeEndpoints: can('endpoints:write'),
    // Replay, Resend, Recover and erasing an outcome.
    admin: can('admin'),
  };
}
