// Drives the outcome log of relay's console in a real Chromium for
// cmd/relay's TestConsoleOutcomeLogInChromium, which fills the namespace
// shop as its comment says and passes the admin link, the second that
// splits the two batches (CONSOLE_SPLIT) and where screenshots go.
import { env, finish, open, shooter, viewports } from './browser.mjs';
const adminLink = env('CONSOLE_ADMIN_LINK');
const shots = env('CONSOLE_SCREENSHOTS');
const split = new Date(env('CONSOLE_SPLIT'));
const fail = (msg) => {
  throw new Error(msg);
};
const rid = (prefix, i) => `${prefix}-${String(i).padStart(3, '0')}`;
const kindOf = (i) => ['committed', 'aborted', 'expired'][i % 3];

const run = await open('log', viewports[0]);
const { page, failures } = run;
try {
  page.on('console', (m) => {
    // 400: a filter refused on purpose.
    if (m.type() === 'error' && !/status of 400/.test(m.text())) failures.push('console error: ' + m.text());
  });
  const shot = shooter(run, shots, { fits: true });
  const step = (s) => console.log('STEP ' + s);

  const log = page.getByRole('region', { name: 'Outcomes, newest first' });
  // rendered waits for the log page of the address now in the bar.
  const rendered = () => page.waitForFunction(() => document.querySelector('main [data-log]')?.dataset.log === location.hash);
  // moved does what leaves the page and waits for the page it leads to.
  const moved = async (act) => {
    const before = await page.evaluate(() => location.hash);
    await act();
    await page.waitForFunction((b) => location.hash !== b, before);
    await rendered();
  };
  // rows are the reservation ids and kinds of the log's rows as shown.
  const rows = async () => {
    await rendered();
    if (!(await log.count())) return [];
    const ids = await log.getByRole('rowheader').allInnerTexts();
    const kinds = await log.locator('tbody tr td:nth-child(2)').allInnerTexts();
    return ids.map((id, i) => ({ id: id.trim(), kind: kinds[i].trim().replace(' ', '_') }));
  };
  // open goes to hash and waits for its page to be read.
  const open = async (hash) => {
    await moved(() => page.evaluate((h) => {
      location.hash = h;
    }, hash));
  };
  // apply fills the filter form of the unfiltered log as an operator
  // would, and submits it.
  const apply = async (fill) => {
    if (await page.evaluate(() => location.hash !== '#/ns/shop/outcomes')) await open('#/ns/shop/outcomes');
    await fill();
    await moved(() => page.getByRole('button', { name: 'Apply filters' }).click());
  };
  const all = (list, ok, what) => {
    const bad = list.filter((r) => !ok(r));
    if (bad.length) fail(`${what}: ${bad.map((r) => r.id + ' ' + r.kind).join(', ')} kept`);
  };
  const same = (got, want, what) => {
    if (got.join(',') !== want.join(',')) fail(`${what}: ${got.join(',')}, want ${want.join(',')}`);
  };
  const ids = (list) => list.map((r) => r.id);
  const range = (prefix, from, to) => {
    const out = [];
    for (let i = from; i >= to; i--) out.push(rid(prefix, i));
    return out;
  };

  step('the namespace page links to the log and shows the newest outcomes first');
  await page.goto(adminLink);
  await page.getByRole('heading', { name: 'Namespaces' }).waitFor();
  await page.evaluate(() => {
    location.hash = '#/ns/shop';
  });
  await page.getByRole('heading', { name: 'Namespace shop' }).waitFor();
  const recent = page.getByRole('region', { name: 'The newest 20, newest first' });
  same((await recent.getByRole('rowheader').allInnerTexts()).slice(0, 2), [rid('inv', 29), rid('inv', 28)], 'the namespace page\'s recent outcomes');
  if ((await page.getByText('Recent outcomes', { exact: true }).count()) !== 1) fail('"Recent outcomes" is said more than once');
  await moved(() => page.getByRole('link', { name: 'All outcomes: filter, search and page back' }).click());

  step('the log\'s first row is the newest, and Older and Newer page through all 60');
  let got = await rows();
  same(ids(got), range('inv', 29, 5), 'the first page');
  await shot('outcomelog');
  if (await page.getByRole('link', { name: 'Newer' }).count()) fail('the first page offers Newer');
  await moved(() => page.getByRole('link', { name: 'Older' }).click());
  got = await rows();
  same(ids(got), [...range('inv', 4, 0), ...range('ord', 29, 10)], 'the second page');
  await moved(() => page.getByRole('link', { name: 'Older' }).click());
  got = await rows();
  same(ids(got), range('ord', 9, 0), 'the third page');
  if (await page.getByRole('link', { name: 'Older' }).count()) fail('the last page offers Older');
  await moved(() => page.getByRole('link', { name: 'Newer' }).click());
  got = await rows();
  same(ids(got), [...range('inv', 4, 0), ...range('ord', 29, 10)], 'Newer from the third page');
  await moved(() => page.getByRole('link', { name: 'Newer' }).click());
  got = await rows();
  same(ids(got), range('inv', 29, 5), 'Newer from the second page');

  step('the state filter narrows the log and stays in its form across a refresh');
  await apply(() => page.getByLabel('State').selectOption('delivered'));
  got = await rows();
  // Only audit delivered anything: the aborted outcomes of inv.
  same(ids(got), range('inv', 29, 0).filter((_, i) => kindOf(29 - i) === 'aborted'), 'delivered anywhere');
  // A form that shows the filter applied is no input of the operator's: the
  // page refreshes, and keeps it.
  if ((await page.evaluate(() => window.relayConsole.refresh())) !== 'refreshed') fail('the log with a filter applied does not refresh');
  if ((await page.getByLabel('State').inputValue()) !== 'delivered') fail('the state filter is gone after a refresh');
  // A filter typed and not applied holds the refresh, and survives it.
  await page.getByLabel('Reservation id starts with').fill('inv-0');
  await page.locator('h1').click();
  if ((await page.evaluate(() => window.relayConsole.refresh())) !== 'held') fail('a filter being typed does not hold the refresh');
  if ((await page.getByLabel('Reservation id starts with').inputValue()) !== 'inv-0') fail('a filter being typed is lost');
  await page.getByLabel('Reservation id starts with').fill('');
  await shot('outcomelog-filtered');

  step('the endpoint filter narrows the log to the outcomes that endpoint had');
  await apply(() => page.getByLabel('Endpoint').selectOption('audit'));
  got = await rows();
  same(ids(got), range('inv', 29, 5), 'the first page of audit\'s outcomes');
  await moved(() => page.getByRole('link', { name: 'Older' }).click());
  same(ids(await rows()), range('inv', 4, 0), 'the second page of audit\'s outcomes');
  if (await page.getByRole('link', { name: 'Older' }).count()) fail('audit\'s outcomes go on past inv-000');

  step('the kind filter narrows the log');
  await apply(() => page.getByLabel('Kind').selectOption('expired'));
  got = await rows();
  all(got, (r) => r.kind === 'expired', 'kind expired');
  if (got.length !== 20) fail(`kind expired: ${got.length} rows, want 20`);
  if (got[0].id !== rid('inv', 29)) fail('kind expired: the first row is ' + got[0].id);

  step('the reservation id prefix narrows the log');
  await apply(() => page.getByLabel('Reservation id starts with').fill('ord-01'));
  same(ids(await rows()), range('ord', 19, 10), 'prefix ord-01');

  step('the time range narrows the log');
  const local = (d) => {
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  };
  await apply(() => page.getByLabel('Accepted before').fill(local(split)));
  got = await rows();
  same(ids(got), range('ord', 29, 5), 'accepted before the split');
  await apply(() => page.getByLabel('Accepted from').fill(local(split)));
  got = await rows();
  same(ids(got), range('inv', 29, 5), 'accepted from the split');
  // Its first page is the unfiltered one's: the range shows past it.
  await moved(() => page.getByRole('link', { name: 'Older' }).click());
  same(ids(await rows()), range('inv', 4, 0), 'the second page accepted from the split');
  if (await page.getByRole('link', { name: 'Older' }).count()) fail('the outcomes accepted from the split go on past inv-000');
  if ((await page.evaluate(() => window.relayConsole.refresh())) !== 'refreshed') fail('the log with a time range applied does not refresh');
  // A time at a whole minute, which the browser keeps without its seconds.
  const minute = new Date(Math.ceil((Date.now() + 60000) / 60000) * 60000);
  await apply(() => page.getByLabel('Accepted before').fill(local(minute)));
  same(ids(await rows()), range('inv', 29, 5), 'accepted before a minute from now');
  if ((await page.evaluate(() => window.relayConsole.refresh())) !== 'refreshed') fail('the log before a whole minute does not refresh');

  step('a filter the API refuses is shown beside the form, to be mended');
  await apply(() => page.getByLabel('State').selectOption('filtered'));
  await page.getByRole('alert').getByText('state filtered needs an endpoint').waitFor();
  await shot('outcomelog-refused');

  step('a pending row leads to the stream page that holds it');
  await open('#/ns/shop/outcomes');
  const row = log.getByRole('row').filter({ has: page.getByRole('rowheader', { name: rid('inv', 25), exact: true }) });
  await row.getByRole('link', { name: /^billing: pending/ }).click();
  await page.getByRole('heading', { name: 'Endpoint billing' }).waitFor();
  const pending = page.getByRole('region', { name: 'Pending rows in delivery order' });
  const here = pending.getByRole('row').filter({ has: page.getByRole('rowheader', { name: rid('inv', 25), exact: true }) });
  await here.waitFor();
  if ((await here.getAttribute('aria-current')) !== 'true') fail('the row led to is not marked as the one');
  await page.getByRole('link', { name: 'First rows' }).waitFor();
  await shot('stream-from-outcome');
  // The outcome's own page leads to the same place.
  await page.evaluate(() => {
    location.hash = '#/ns/shop/outcomes/inv-025';
  });
  await page.getByRole('link', { name: 'Pending: replay it from its stream' }).click();
  await page.getByRole('heading', { name: 'Endpoint billing' }).waitFor();
  await pending.getByRole('rowheader', { name: rid('inv', 25), exact: true }).waitFor();

  step('the endpoint page shows a failed attempt\'s status, duration and answer');
  await page.evaluate(() => {
    location.hash = '#/ns/flaky/endpoints/ledger';
  });
  await page.getByRole('heading', { name: 'Endpoint ledger' }).waitFor();
  const attempt = page.getByRole('region', { name: 'Pending rows in delivery order' }).locator('ol.attempts li').first();
  await attempt.waitFor();
  const text = await attempt.innerText();
  if (!/HTTP 503/.test(text) || !/\d+ ms/.test(text)) fail('the attempt shows ' + JSON.stringify(text));
  await attempt.locator('pre.excerpt').getByText('{"error":"ledger locked, try later"}').waitFor();
  await shot('stream-attempts');
  // On a phone the row is a card: the answer wraps inside it.
  await page.setViewportSize(viewports[1]);
  const [excerpt, card] = await Promise.all([attempt.locator('pre.excerpt').boundingBox(),
    page.getByRole('region', { name: 'Pending rows in delivery order' }).locator('tbody tr').first().boundingBox()]);
  if (excerpt.x + excerpt.width > card.x + card.width) fail(`the answer reaches ${excerpt.x + excerpt.width} px, past its card's edge at ${card.x + card.width} px`);
  await page.setViewportSize(viewports[0]);
} catch (e) {
  failures.push(e.stack || String(e));
}
await finish(run);
