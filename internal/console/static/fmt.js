const numbers = new Intl.NumberFormat();

// num shows a count with the viewer's thousands separators.
export function num(n) {
  return numbers.format(n ?? 0);
}

export function bytes(n) {
  if (n < 1024) return num(n) + ' B';
  if (n < 1024 * 1024) return num(Math.round(n / 1024)) + ' KiB';
  return num(Math.round(n / 1024 / 1024)) + ' MiB';
}

// span is a duration in seconds, coarsely: 5 s, 3 min, 2 h, 4 d.
function span(s) {
  if (s < 120) return num(s) + ' s';
  if (s < 7200) return num(Math.round(s / 60)) + ' min';
  if (s < 172800) return num(Math.round(s / 3600)) + ' h';
  return num(Math.round(s / 86400)) + ' d';
}

// relative is iso against now: "3 min ago", "in 20 s", "now".
export function relative(iso, now = Date.now()) {
  const s = Math.round((new Date(iso).getTime() - now) / 1000);
  if (Math.abs(s) < 2) return 'now';
  return s < 0 ? span(-s) + ' ago' : 'in ' + span(s);
}

const absolute = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'long' });

// full is iso in the viewer's zone, the zone named.
export function full(iso) {
  return absolute.format(new Date(iso));
}

// when renders an API time relative to now. The absolute time in the
// viewer's zone is in the element's text for screen readers and copying,
// hidden until the time is hovered or focused (it takes focus for that).
export function when(h, iso, now = Date.now()) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  const abs = full(iso);
  return h('time', { datetime: iso, tabindex: 0, class: 'when' },
    relative(iso, now), h('span', { class: 'abs' }, ' (' + abs + ')'));
}

// clockTime is a time of day in the viewer's zone, for "updated 12:03:04".
export function clockTime(d) {
  return d.toLocaleTimeString(undefined, { hour: 'numeric', minute: '2-digit', second: '2-digit' });
}
