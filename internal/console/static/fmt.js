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

// when renders an API time in the viewer's zone, UTC on hover.
export function when(h, iso) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  const d = new Date(iso);
  return h('time', { datetime: iso, title: d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC') },
    d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' }));
}

// age is how long ago iso was, coarsely: 5 s, 3 min, 2 h, 4 d.
export function age(iso, now = Date.now()) {
  if (!iso) return '—';
  const s = Math.max(0, Math.round((now - new Date(iso).getTime()) / 1000));
  if (s < 120) return num(s) + ' s';
  if (s < 7200) return num(Math.round(s / 60)) + ' min';
  if (s < 172800) return num(Math.round(s / 3600)) + ' h';
  return num(Math.round(s / 86400)) + ' d';
}
