// The namespace page's chart of one stream's last hour: delivered and
// failed attempts per minute, drawn as SVG from the API's per_minute.
import { h, s } from './dom.js';
import { num, when } from './fmt.js';

const W = 600;
const H = 120;
const PAD = 4;

// points is the polyline of one series over the minutes, oldest on the
// left, 0 at the bottom and max at the top.
function points(minutes, key, max) {
  const step = (W - 2 * PAD) / Math.max(minutes.length - 1, 1);
  return minutes.map((m, i) => `${(PAD + i * step).toFixed(1)},${(H - PAD - (m[key] / max) * (H - 2 * PAD)).toFixed(1)}`).join(' ');
}

// minuteChart is a figure for endpoint id: the SVG, which names its totals
// for screen readers, a legend with the totals, and the time axis relative
// to now (the absolute time on hover and focus).
export function minuteChart(id, minutes) {
  const delivered = minutes.reduce((a, m) => a + m.delivered, 0);
  const failed = minutes.reduce((a, m) => a + m.failed_attempts, 0);
  const peak = minutes.reduce((a, m) => Math.max(a, m.delivered, m.failed_attempts), 0);
  const max = Math.max(peak, 1);
  const summary = `${id}, last hour: ${num(delivered)} delivered, ${num(failed)} failed attempts; at most ${num(peak)} a minute.`;
  // The failed line is dashed as well as red, so the two differ without
  // colour.
  const titleId = 'chart-title-' + id;
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-labelledby': titleId,
    class: 'chart', 'data-points': minutes.length,
  },
  s('title', { id: titleId }, summary),
  s('line', { class: 'axis', x1: PAD, x2: W - PAD, y1: H - PAD, y2: H - PAD }),
  s('line', { class: 'grid', x1: PAD, x2: W - PAD, y1: PAD, y2: PAD }),
  s('polyline', { class: 'series delivered', points: points(minutes, 'delivered', max) }),
  s('polyline', { class: 'series failed', points: points(minutes, 'failed_attempts', max) }));
  const first = minutes[0];
  return h('figure', { class: 'chart-card card', 'data-endpoint': id },
    h('figcaption', {},
      h('strong', {}, id),
      h('span', { class: 'legend' },
        h('span', { class: 'key delivered' }, num(delivered) + ' delivered'),
        h('span', { class: 'key failed' }, num(failed) + (failed === 1 ? ' failed attempt' : ' failed attempts')),
        h('span', { class: 'muted' }, 'peak ' + num(peak) + '/min'))),
    svg,
    h('div', { class: 'ticks muted' },
      first ? h('span', {}, 'From ', when(h, first.start)) : h('span', {}),
      h('span', {}, 'now')));
}
