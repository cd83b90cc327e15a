// The fleet's part of the namespaces page: the figures relay keeps over
// every namespace (GET /v1/fleet), the namespaces with a failing endpoint
// and those with one an operator disabled, each listed from the set relay
// keeps of them (GET /v1/namespaces?failing=true, ?disabled=true), and a
// search by name prefix. Every call costs relay the same whatever the
// number of namespaces, so the view tells the truth at any scale.
import { h } from './dom.js';
import { call, enc } from './api.js';
import { num, bytes, when } from './fmt.js';

// FLEET_LIST is how many failing or disabled namespaces a view lists; the
// figures above count them all.
export const FLEET_LIST = 100;

// prefixOf is the search's prefix from the route, '' when none.
export const prefixOf = (r) => (r.params.get('prefix') || '').trim();

// withPrefix is a namespace list query narrowed by the search.
export const withPrefix = (q, prefix) => q + (prefix ? '&prefix=' + enc(prefix) : '');

// fleetView renders the figures, the failing and the disabled namespaces.
// table, row and head are the page's, so the tables look as its others.
export async function fleetView(r, { table, row, head, rank }) {
  const prefix = prefixOf(r);
  const [fleet, failing, disabled] = await Promise.all([
    call('GET', '/v1/fleet'),
    call('GET', withPrefix('/v1/namespaces?failing=true&limit=' + FLEET_LIST, prefix)),
    call('GET', withPrefix('/v1/namespaces?disabled=true&limit=' + FLEET_LIST, prefix)),
  ]);
  const oldest = fleet.oldest_pending;
  // Relay lists them from the set it keeps of them, over every namespace.
  const more = (page, what, all) => page.next_cursor
    ? h('p', { class: 'muted' }, `The first ${num(FLEET_LIST)} ${what} are listed; the count above has them all.`)
    : page.namespaces.length ? h('p', { class: 'muted' }, all) : null;
  const under = prefix ? ` starting “${prefix}”` : '';
  return h('div', { 'data-key': 'fleet' },
    h('h2', {}, prefix ? 'Every namespace (the search narrows the lists below, not these figures)' : 'Every namespace'),
    h('dl', { class: 'facts', 'data-key': 'fleet-figures' },
      h('dt', {}, 'Namespaces failing'), h('dd', { 'data-key': 'fleet-failing' }, num(fleet.failing_namespaces)),
      h('dt', {}, 'Disabled by an operator'), h('dd', { 'data-key': 'fleet-disabled' }, num(fleet.disabled_namespaces)),
      h('dt', {}, 'Pending'), h('dd', { 'data-key': 'fleet-backlog' }, num(fleet.backlog.rows) + ' rows, ' + bytes(fleet.backlog.bytes)),
      h('dt', {}, 'Oldest pending'), h('dd', { 'data-key': 'fleet-oldest' },
        !oldest ? h('span', { class: 'muted' }, 'not sampled yet')
          : oldest.accepted_at ? ['accepted ', when(h, oldest.accepted_at), ' (sampled ', when(h, oldest.sampled_at), ')']
            // Rows that arrived since the sampler's last pass wait for its next.
            : fleet.backlog.rows > 0 ? ['not dated yet (last sampled ', when(h, oldest.sampled_at), ')']
              : ['none (sampled ', when(h, oldest.sampled_at), ')'])),
    h('h2', {}, 'Failing'),
    table('Namespaces with a failing endpoint' + under, head, rank(failing.namespaces).map(row),
      prefix ? `No namespace${under} has a failing endpoint.` : 'No namespace has a failing endpoint.'),
    more(failing, 'failing namespaces', 'Every namespace was looked at.'),
    h('h2', {}, 'Disabled by an operator'),
    table('Namespaces with an endpoint disabled by an operator' + under, head, rank(disabled.namespaces).map(row),
      prefix ? `No namespace${under} has an endpoint an operator disabled.` : 'No namespace has an endpoint an operator disabled.'),
    more(disabled, 'namespaces with a disabled endpoint', 'Every one is listed.'));
}

// searchForm narrows the page to the namespaces whose name starts with
// what is typed; an empty search shows them all.
export function searchForm(prefix) {
  const input = h('input', { id: 'ns-prefix', name: 'prefix', value: prefix, autocomplete: 'off', spellcheck: 'false',
    pattern: '[a-z0-9][a-z0-9_\\-]{0,62}', 'data-key': 'ns-prefix' });
  return h('form', {
    class: 'inline', role: 'search', 'aria-label': 'Namespaces by name', onsubmit: (e) => {
      e.preventDefault();
      const v = e.currentTarget.elements.prefix.value.trim();
      location.hash = v ? '#/?prefix=' + enc(v) : '#/';
    },
  }, h('label', { for: 'ns-prefix' }, 'Namespaces starting'), input, h('button', { type: 'submit', 'data-key': 'ns-prefix-go' }, 'Search'));
}
