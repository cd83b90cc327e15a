// The namespace page's chart of one stream's last hour: delivered and
// failed attempts per minute, drawn as SVG from the API's per_minute.
import { h, s } from './dom.js';
import { num, when } from './fmt.js';

const W = 600;
const H = 120;
const PAD = 4;

// scale is the chart's top: the least of 2, 4, 6, 8 or 10 times a power
// of ten that holds peak, so that its half, the middle tick, is a whole
// count too.
export function scale(peak) {
  for (let p = 1; ; p *= 10) {
    for (const m of [2, 4, 6, 8, 10]) {
      if (m * p >= peak) return m * p;
    }
  }
}

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
  const max = scale(peak);
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
  s('line', { class: 'grid', x1: PAD, x2: W - PAD, y1: H / 2, y2: H / 2 }),
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
    // The scale is HTML beside the SVG, which stretches to its box and
    // would stretch text drawn in it; screen readers have the summary.
    h('div', { class: 'plot' },
      h('div', { class: 'yaxis muted', 'aria-hidden': 'true', 'data-max': max },
        h('span', { class: 'y-max' }, num(max) + '/min'),
        h('span', { class: 'y-mid' }, num(max / 2)),
        h('span', { class: 'y-zero' }, '0')),
      svg),
    h('div', { class: 'ticks muted' },
      first ? h('span', {}, 'From ', when(h, first.start)) : h('span', {}),
      h('span', {}, 'now')));
}
