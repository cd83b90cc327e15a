// Drives relay's console in a real Chromium for cmd/relay's
// TestConsoleInChromium. The Go test starts relay and the receiver, passes
// the links in the environment, and answers on stdin: "fix" once the
// receiver takes the stuck outcome, "resent" and "recovered" once it saw
// the outcomes again.
import { createInterface } from 'node:readline';
import { operatorWork, wideTable } from './work.mjs';
import { tokenWork } from './tokens.mjs';
import { env, finish, open, shooter, viewports } from './browser.mjs';
const adminLink = env('CONSOLE_ADMIN_LINK');
const boundLink = env('CONSOLE_BOUND_LINK');
const readLink = env('CONSOLE_READ_LINK');
const lapsingLink = env('CONSOLE_LAPSING_LINK');
const heldRID = env('CONSOLE_HELD_RID');
const shots = env('CONSOLE_SCREENSHOTS');
const stuck = env('CONSOLE_STUCK_RID');
const delivered = env('CONSOLE_DELIVERED_RID');
const order = env('CONSOLE_NAMESPACE_ORDER').split(',');
const longEndpoint = env('CONSOLE_LONG_ENDPOINT');
const longRID = env('CONSOLE_LONG_RID');

const stdin = createInterface({ input: process.stdin });
const answers = [];
let waiting = null;
stdin.on('line', (l) => (waiting ? (waiting(l), (waiting = null)) : answers.push(l)));
const ask = (q) => {
  console.log('ASK ' + q);
  return answers.length ? Promise.resolve(answers.shift()) : new Promise((r) => (waiting = r));
};

// The scenario is driven at CONSOLE_WIDTH px (1280 unless set): the
// console must work, not only look right, on a phone's width.
const drivenWidth = Number(process.env.CONSOLE_WIDTH || 1280);
const run = await open('chromium', { width: drivenWidth, height: 900 });
const { ctx, page, failures } = run;
try {
  page.on('console', (m) => {
    // 400: a recovery refused on purpose (work.mjs); 401, 403: tokens
    // refused on purpose.
    if (m.type() === 'error' && !/status of 40[013]/.test(m.text())) failures.push('console error: ' + m.text());
  });
  // Nothing may be loaded from outside relay.
  const origin = new URL(adminLink).origin;
  page.on('request', (r) => {
    if (!r.url().startsWith(origin)) failures.push('request outside relay: ' + r.url());
  });

  // Each page is kept as screenshots at both sizes, and axe finds no
  // violation on it at either.
  const shot = shooter(run, shots);
  const step = (s) => console.log('STEP ' + s);

  step(`driven at ${drivenWidth} px wide`);
  if (page.viewportSize().width !== drivenWidth) throw new Error('viewport ' + page.viewportSize().width + ' px, want ' + drivenWidth);
  // No page may be wider than the viewport: wide tables scroll in their own box.
  const overflow = async () => page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  step('the link signs in and leaves no token in the address bar');
  await page.goto(adminLink);
  await page.getByRole('heading', { name: 'Namespaces' }).waitFor();
  if (page.url().includes('token')) throw new Error('the token stayed in the address bar: ' + page.url());
  if (!(await page.evaluate(() => sessionStorage.getItem('relay.token')))) throw new Error('no token in sessionStorage');
  await page.getByRole('link', { name: 'other', exact: true }).first().waitFor();
  if ((await overflow()) > 0) throw new Error('the namespaces page is wider than the viewport');

  step('namespaces with a failing endpoint come first, the biggest backlog first among them');
  const all = page.locator('table', { has: page.locator('caption', { hasText: 'Namespaces, failing first' }) });
  const names = await all.locator('tbody th').allInnerTexts();
  if (names.join(',') !== order.join(',')) throw new Error('namespaces in the order ' + names + ', want ' + order);
  await all.locator('tbody tr').first().getByText('1 failing').waitFor();
  // An endpoint an operator disabled is shown apart, and does not make its
  // namespace failing.
  const other = all.locator('tbody tr', { has: page.getByRole('link', { name: 'other', exact: true }) });
  await other.getByText('1 disabled').waitFor();
  if (await other.getByText(/ failing$/).count()) throw new Error('a namespace whose only disabled endpoint an operator disabled is marked failing');
  // The failing ones are also listed on their own, found by relay.
  const failingOnes = page.locator('table', { has: page.locator('caption', { hasText: 'Namespaces with a failing endpoint' }) });
  const failingNames = await failingOnes.locator('tbody th').allInnerTexts();
  const badged = [];
  for (const tr of await all.locator('tbody tr').all()) {
    if (await tr.getByText(/ failing$/).count()) badged.push(await tr.locator('th').innerText());
  }
  if (!badged.length || failingNames.join(',') !== badged.join(',')) throw new Error('failing namespaces ' + failingNames + ', want ' + badged);
  await page.getByText('Every namespace was looked at.').waitFor();
  await shot('namespaces');

  step('the failing endpoint comes first, backing off');
  await page.getByRole('link', { name: 'acme', exact: true }).first().click();
  const first = page.locator('table').first().locator('tbody tr').first();
  await first.getByText('backing off').waitFor();
  const firstEndpoint = await first.locator('th').innerText();
  if (firstEndpoint !== 'billing') throw new Error('first endpoint is ' + firstEndpoint + ', want the failing billing');

  step('each endpoint has its chart of the last hour, a point a minute');
  const charts = page.locator('figure.chart-card');
  await charts.first().waitFor();
  if ((await charts.count()) !== 2) throw new Error((await charts.count()) + ' charts, want one per endpoint');
  const chart = page.locator('figure[data-endpoint="billing"]');
  for (const series of ['delivered', 'failed']) {
    const pts = (await chart.locator('polyline.' + series).getAttribute('points')).trim().split(/\s+/);
    if (pts.length !== 60) throw new Error(`billing's ${series} line has ${pts.length} points, want 60`);
    // The last minutes hold the delivery and the refusal: a point above
    // the baseline, which is y 116 of 120.
    if (!pts.some((p) => Number(p.split(',')[1]) < 116)) throw new Error(`billing's ${series} line is flat: ${pts.join(' ')}`);
  }
  // The scale: its top holds the peak, its middle is half the top, and
  // the peak is drawn at the height the scale says (the plot's 112 px
  // between y 4 and 116).
  const top = Number(await chart.locator('.yaxis').getAttribute('data-max'));
  const peak = Number((await chart.getByText(/^peak [0-9,]+\/min$/).innerText()).replace(/[^0-9]/g, ''));
  if (!(top >= peak && top > 0)) throw new Error(`billing's chart tops at ${top}, under its peak ${peak}`);
  const ticks = await chart.locator('.yaxis span').allInnerTexts();
  if (ticks.join(' ') !== `${top}/min ${top / 2} 0`) throw new Error(`billing's chart is labelled ${ticks}, want ${top}/min, ${top / 2}, 0`);
  const ys = [];
  for (const series of ['delivered', 'failed']) {
    for (const p of (await chart.locator('polyline.' + series).getAttribute('points')).trim().split(/\s+/)) ys.push(Number(p.split(',')[1]));
  }
  const want = 116 - (peak / top) * 112;
  if (Math.abs(Math.min(...ys) - want) > 0.1) throw new Error(`billing's peak ${peak} is drawn at y ${Math.min(...ys)}, want ${want} on a scale to ${top}`);
  await chart.getByText(/^[1-9][0-9,]* delivered$/).waitFor();
  await chart.getByText(/^[1-9][0-9,]* failed attempts?$/).waitFor();
  const label = await chart.locator('svg').getAttribute('aria-labelledby');
  if (!/delivered/.test(await page.locator('#' + label).textContent())) throw new Error('the chart has no text alternative');
  await shot('namespace');

  step('the stuck row, replayed once the receiver is fixed, is delivered');
  await page.getByRole('link', { name: 'billing', exact: true }).first().click();
  await page.getByRole('button', { name: 'Replay ' + stuck }).waitFor();
  // Its health: since when its calls fail, and how the last one did.
  await page.locator('dt', { hasText: 'Failing since' }).waitFor();
  const streamPts = (await page.locator('figure[data-endpoint="billing"] polyline.delivered').getAttribute('points')).trim().split(/\s+/);
  if (streamPts.length !== 60) throw new Error(`the stream page's chart has ${streamPts.length} points, want 60`);
  await shot('stream');
  if ((await ask('fix')) !== 'fixed') throw new Error('the receiver was not fixed');
  await page.getByRole('button', { name: 'Replay ' + stuck }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Replay' }).click();
  await page.getByRole('status').getByText('Replayed ' + stuck).waitFor();
  await page.getByText('Nothing is pending').waitFor({ timeout: 30000 });
  // Delivered again, it is failing no more.
  await page.locator('dt', { hasText: 'Failing since' }).waitFor({ state: 'detached', timeout: 30000 });
  await shot('stream-drained');

  step('search finds an outcome, and resend sends it again');
  await page.getByLabel('Namespace', { exact: true }).fill('acme');
  await page.getByLabel('Reservation id').fill(delivered);
  await page.getByRole('button', { name: 'Find outcome' }).click();
  await page.getByRole('heading', { name: 'Outcome ' + delivered }).waitFor();
  await page.getByRole('button', { name: 'Resend to billing' }).waitFor();
  await shot('outcome');
  await page.getByRole('button', { name: 'Resend to billing' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Resend' }).click();
  await page.getByRole('status').getByText('Resent ' + delivered).waitFor();
  if ((await ask('resent')) !== 'delivered again') throw new Error('the resend did not arrive');

  step('a recovery from the stream page queues the delivered outcomes again and is done');
  await page.getByRole('link', { name: 'billing', exact: true }).first().click();
  await page.getByRole('heading', { name: 'Recover' }).waitFor();
  // datetime-local takes the viewer's local time: from an hour ago to a
  // minute ahead.
  const [since, until] = await page.evaluate(() => {
    const local = (ms) => { const d = new Date(ms); return new Date(ms - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19); };
    return [local(Date.now() - 3600e3), local(Date.now() + 60e3)];
  });
  await page.getByLabel('From', { exact: true }).fill(since);
  await page.getByLabel('Until', { exact: true }).fill(until);
  await page.getByRole('button', { name: 'Start recovery' }).click();
  // The confirmation says how many outcomes the range holds, counted first.
  await page.getByRole('dialog').getByText(/Queue again the 3 outcomes billing was delivered/).waitFor();
  const recoverOk = page.getByRole('dialog').getByRole('button', { name: 'Recover' });
  // Only what stops or removes something asks in red.
  if (await recoverOk.evaluate((b) => b.classList.contains('danger'))) throw new Error('the confirmation of a recovery is red');
  await recoverOk.click();
  await page.waitForURL(/[?&]job=[0-9a-f]{32}$/);
  await page.getByText(/^Recovery [0-9a-f]{32}: done, [0-9,]+ of at most [0-9,]+ examined, 3 queued/).waitFor({ timeout: 30000 });
  if ((await ask('recovered')) !== 'delivered again') throw new Error('the recovered outcomes did not arrive');
  await page.getByText('Nothing is pending').waitFor({ timeout: 30000 });
  // Delivered again, it is failing no more.
  await page.locator('dt', { hasText: 'Failing since' }).waitFor({ state: 'detached', timeout: 30000 });
  await shot('stream-recovered');

  for (const vp of viewports) {
    await operatorWork(page, { origin, vp, longEndpoint, longRID, step, shots });
  }
  await wideTable(page, { step, longEndpoint });
  await page.setViewportSize({ width: drivenWidth, height: 900 });

  step('an unknown page says where to go');
  await page.goto(new URL('/console/#/nope', adminLink).href);
  await page.getByRole('heading', { name: 'No such page' }).waitFor();
  await shot('missing');

  step('log out drops the token');
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByLabel('API token').waitFor();
  if (await page.evaluate(() => sessionStorage.getItem('relay.token'))) throw new Error('the token survived log out');
  await shot('sign-in');

  await tokenWork(page, { adminLink, boundLink, readLink, heldRID, stuck, delivered, longEndpoint, step, shot });

  step('a refused token asks for another');
  await page.evaluate(() => sessionStorage.setItem('relay.token', 'not-a-token'));
  await page.reload();
  await page.getByText('The token was refused').waitFor();
  await shot('refused');
  if (await page.evaluate(() => sessionStorage.getItem('relay.token'))) throw new Error('a refused token was kept');

  // Last, since the clock it installs stays with every page of the
  // browser.
  step('a link past its time signs out, saying when it lapsed');
  const lapsing = await ctx.newPage();
  await lapsing.clock.install();
  await lapsing.goto(lapsingLink);
  await lapsing.getByRole('heading', { name: 'Namespace other' }).waitFor();
  await lapsing.clock.fastForward('02:01');
  await lapsing.getByText('The token expired at').waitFor();
  if (await lapsing.evaluate(() => sessionStorage.getItem('relay.token'))) throw new Error('a lapsed token was kept');
  await lapsing.close();
} catch (e) {
  failures.push(e.stack || String(e));
}
stdin.close();
await finish(run);
