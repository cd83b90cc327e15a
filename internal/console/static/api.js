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

// claims are the token's own, read only to choose a start page: the API
// decides what the token may do.
export function claims() {
  try {
    const part = token().split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part));
  } catch {
    return {};
  }
}

