// The operator's work on the console survives it: what drive.mjs checks at
// each of the two sizes, on the namespace "wide" that holds the widest ids
// relay takes (a 63-character endpoint id with a row of a 128-character
// reservation id that stays pending) beside many others.
//
// A refresh is run through the console's hook, relayConsole.refresh(),
// which does what its timer does; where the timer itself must fire, the
// wait is for the page's "updated" time to change, not a fixed sleep.

import { join } from 'node:path';
import { audit } from './axe.mjs';

const fail = (msg) => {
  throw new Error(msg);
};

export async function operatorWork(page, { origin, vp, longEndpoint, longRID, step, shots }) {
  const shot = async (name) => {
    await page.screenshot({ path: join(shots, `${name}-${vp.width}.png`), fullPage: true });
    await audit(page, `${name} at ${vp.width}x${vp.height}`);
  };
  await page.setViewportSize(vp);
  const at = `at ${vp.width}x${vp.height}`;
  const phone = vp.width < 600;
  const fresh = page.locator('#freshness');
  const readAt = () => fresh.getAttribute('data-read-at');
  const hook = () => page.evaluate(() => window.relayConsole.refresh());
  const heldTwice = async (what) => {
    const before = await readAt();
    for (let i = 0; i < 2; i++) {
      const got = await hook();
      if (got !== 'held') fail(`${at}: a refresh ${what} answered ${got}, want held`);
    }
    if ((await readAt()) !== before) fail(`${at}: the page was read again ${what}`);
    const said = await fresh.innerText();
    if (!/paused/.test(said)) fail(`${at}: the page does not say it is paused ${what}: ${said}`);
  };
  const go = async (hash, heading) => {
    await page.evaluate((h) => {
      location.hash = h;
    }, hash);
    await page.getByRole('heading', { name: heading, exact: true }).waitFor();
    await page.locator('#freshness[data-read-at]:not([data-read-at=""])').waitFor();
  };
  const fits = async (what) => {
    const [w, iw, wide] = await page.evaluate(() => {
      // The outermost elements that reach past the viewport, to say why.
      const past = [...document.body.querySelectorAll('*')].filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1 &&
        !el.parentElement.closest('.scroll') && el.parentElement.getBoundingClientRect().right <= window.innerWidth + 1);
      return [document.scrollingElement.scrollWidth, window.innerWidth, past.slice(0, 3).map((el) => el.outerHTML.slice(0, 120))];
    });
    if (w > iw) fail(`${at}: ${what} is ${w} px wide in a ${iw} px viewport: ${wide.join(' | ')}`);
  };
  const inView = async (loc, what) => {
    const box = await loc.evaluate((el) => {
      const r = el.getBoundingClientRect();
      return { top: r.top, bottom: r.bottom, height: window.innerHeight };
    });
    // A pixel's grace for layout's fractions.
    if (box.top < -1 || box.bottom > box.height + 1) fail(`${at}: ${what} is at ${box.top}..${box.bottom}, outside the viewport 0..${box.height}`);
  };
  // contrast is the ratio of the focused element's outline colour to the
  // background it is drawn on, its parent's (the outline lies outside it).
  const ringContrast = () => page.evaluate(() => {
    const el = document.activeElement;
    if (!el.matches(':focus-visible')) return { error: 'no visible focus on ' + el.outerHTML.slice(0, 80) };
    const cs = getComputedStyle(el);
    if (cs.outlineStyle === 'none' || parseFloat(cs.outlineWidth) < 2) return { error: 'no outline on ' + el.outerHTML.slice(0, 80) };
    const rgb = (c) => c.match(/[\d.]+/g).map(Number);
    let bg = null;
    for (let p = el.parentElement; p && !bg; p = p.parentElement) {
      const c = rgb(getComputedStyle(p).backgroundColor);
      if (c.length < 4 || c[3] > 0) bg = c;
    }
    bg = bg || [255, 255, 255];
    const lum = ([r, g, b]) => {
      const f = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const [a, b] = [lum(rgb(cs.outlineColor)), lum(bg)].sort((x, y) => y - x);
    return { ratio: (a + 0.05) / (b + 0.05), what: el.tagName + ' ' + el.textContent.slice(0, 30), ring: cs.outlineColor, bg: String(bg) };
  });
  const checkRing = async (where) => {
    const c = await ringContrast();
    if (c.error) fail(`${at}: ${where}: ${c.error}`);
    if (c.ratio < 3) fail(`${at}: ${where}: the focus ring of ${c.what} (${c.ring} on ${c.bg}) has contrast ${c.ratio.toFixed(2)}, want at least 3`);
  };
  const isRed = (loc) => loc.evaluate((el) => {
    const [r, g, b] = getComputedStyle(el).backgroundColor.match(/\d+/g).map(Number);
    return r > 120 && g < 80 && b < 80;
  });

  step(`${at}: / leads to the console; another unknown path is the API's 404`);
  await page.goto(origin + '/');
  await page.waitForURL(origin + '/console/');
  await page.getByRole('heading', { name: 'Namespaces' }).waitFor();
  const nothing = await page.request.get(origin + '/nothing');
  if (nothing.status() !== 404 || !/problem\+json/.test(nothing.headers()['content-type'])) {
    fail(`${at}: /nothing answered ${nothing.status()} ${nothing.headers()['content-type']}, want the API's 404`);
  }

  step(`${at}: the namespaces page keeps a namespace being typed, its scroll and focus`);
  await page.locator('#freshness[data-read-at]:not([data-read-at=""])').waitFor();
  if (!/^Updated .* · refreshes every 15 s/.test(await fresh.innerText())) fail(`${at}: the page says ${await fresh.innerText()}`);
  await fits('the namespaces page');
  const openNs = page.getByLabel('Open a namespace');
  await openNs.fill('wid');
  await heldTwice('while the field has focus');
  await openNs.blur();
  await heldTwice('while the field holds text');
  if ((await openNs.inputValue()) !== 'wid') fail(`${at}: "Open a namespace" holds ${await openNs.inputValue()}, want wid`);
  await openNs.fill('');
  await openNs.blur();
  // Released, a refresh keeps the page's scroll and the focused link.
  await page.getByRole('link', { name: 'many-20', exact: true }).last().focus();
  await page.evaluate(() => {
    document.activeElement.kept = true;
    window.scrollTo(0, 300);
  });
  const y = await page.evaluate(() => window.scrollY);
  if ((await hook()) !== 'refreshed') fail(`${at}: the released namespaces page did not refresh`);
  const after = await page.evaluate(() => ({ y: window.scrollY, kept: document.activeElement.kept === true }));
  if (after.y !== y || !after.kept) fail(`${at}: a refresh moved the page from ${y} to ${after.y} px or lost the focus (kept ${after.kept})`);

  step(`${at}: the namespace page fits its ids and counters and keeps a selection and its scroll`);
  await go('#/ns/wide', 'Namespace wide');
  // Times are relative, absolute with their zone on focus.
  const time = page.locator('time.when').first();
  const shown = await time.evaluate((el) => el.firstChild.textContent);
  if (!/^(now|in .+|.+ ago)$/.test(shown)) fail(`${at}: a time shows ${JSON.stringify(shown)}, want a relative one`);
  await time.focus();
  const abs = time.locator('.abs');
  const absBox = await abs.boundingBox();
  const absText = await abs.textContent();
  if (!absBox || absBox.width < 40 || !/\d{4}.*\d:\d\d:\d\d.*(UTC|GMT|[A-Z]{3,4}|[+-]\d)/.test(absText)) {
    fail(`${at}: a focused time shows ${JSON.stringify(absText)} in ${JSON.stringify(absBox)}, want the absolute time and zone`);
  }
  await time.blur();
  await fits('the namespace page');
  const box = page.getByRole('region', { name: 'Endpoints, failing first' });
  const link = box.getByRole('link', { name: longEndpoint });
  if ((await link.getAttribute('title')) !== longEndpoint || (await link.textContent()) !== longEndpoint) fail(`${at}: the endpoint id is not whole in its link and title`);
  const [sw, cw] = await box.evaluate((el) => [el.scrollWidth, el.clientWidth]);
  if (sw > cw) fail(`${at}: the endpoints table is ${sw} px wide in its ${cw} px box: columns are cut off`);
  if (phone) await stacked(box, at);
  // The text of an id selected, to be copied, stays selected.
  await link.evaluate((a) => {
    const r = document.createRange();
    r.selectNodeContents(a);
    getSelection().removeAllRanges();
    getSelection().addRange(r);
  });
  await heldTwice('while text is selected');
  if (!/paused while text is selected/.test(await fresh.innerText())) fail(`${at}: the page does not say it waits for the selection`);
  const sel = await page.evaluate(() => getSelection().toString());
  if (sel !== longEndpoint) fail(`${at}: the selection is ${JSON.stringify(sel)}, want the endpoint id`);
  await page.evaluate(() => getSelection().removeAllRanges());
  await shot('namespace-wide');

  step(`${at}: the focus ring stands out on the page and on the bar`);
  await page.getByRole('link', { name: 'Namespaces', exact: true }).focus();
  await page.keyboard.press('Tab');
  await checkRing('in the page');
  await page.locator('#search-ns').focus();
  await page.keyboard.press('Shift+Tab');
  await checkRing('on the bar');

  step(`${at}: the stream page keeps a date typed into Recover`);
  await go('#/ns/wide/endpoints/' + longEndpoint, 'Endpoint ' + longEndpoint);
  await fits('the stream page');
  const since = page.getByLabel('From', { exact: true });
  const until = page.getByLabel('Until', { exact: true });
  const [hourAgo, now] = await page.evaluate(() => {
    // Seconds other than :00, which a field's value leaves out.
    const local = (ms) => {
      const d = new Date(ms);
      return new Date(ms - d.getTimezoneOffset() * 60000).toISOString().slice(0, 17) + '07';
    };
    return [local(Date.now() - 3600e3), local(Date.now())];
  });
  await since.fill(now);
  await heldTwice('while Recover has focus');
  await since.blur();
  await heldTwice('while Recover holds a date');
  if ((await since.inputValue()) !== now) fail(`${at}: Recover's From holds ${JSON.stringify(await since.inputValue())}, want ${now}`);
  // Refreshed on demand, in place: the date is still there.
  const before = await readAt();
  await page.getByRole('button', { name: 'Refresh now' }).click();
  await page.waitForFunction((b) => document.querySelector('#freshness').dataset.readAt !== b, before);
  if ((await since.inputValue()) !== now) fail(`${at}: a refresh emptied Recover's From`);

  step(`${at}: a refused recovery says why beside its form, in view, with nothing to confirm`);
  await until.fill(hourAgo);
  await page.getByRole('button', { name: 'Start recovery' }).click();
  // The range is counted before anything is asked: a range relay refuses
  // is refused there.
  const refused = page.locator('form [data-result].problem');
  await refused.waitFor();
  if (await page.getByRole('dialog').isVisible()) fail(`${at}: a refused range asked for a confirmation`);
  await inView(refused, 'the refused recovery');
  const why = await refused.locator('p').first().textContent();
  if (!(await page.locator('#announce-alert').textContent()).includes(why)) fail(`${at}: the refusal (${why}) was not announced`);
  await since.fill('');
  await until.fill('');
  await until.blur();

  step(`${at}: a replay's result shows under its row, in view, and the last result only`);
  const replay = page.getByRole('button', { name: 'Replay ' + longRID });
  // The row at the bottom edge: its result, under it, is out of view
  // until the console brings it in.
  await replay.evaluate((el) => el.scrollIntoView({ block: 'end' }));
  await replay.click();
  const replayOk = page.getByRole('dialog').getByRole('button', { name: 'Replay' });
  if (await isRed(replayOk)) fail(`${at}: the confirmation of a replay is red`);
  await replayOk.click();
  const replayed = page.locator('tr[data-result]', { hasText: 'Replayed ' + longRID });
  await replayed.waitFor();
  await inView(replayed, 'the replay\'s result');
  if (!(await replayed.evaluate((tr) => tr.previousElementSibling?.textContent.includes('Replay')))) fail(`${at}: the replay's result is not under its row`);
  if ((await page.locator('[data-result]').count()) !== 1) fail(`${at}: the recovery's refusal stayed after the next action`);
  if (!(await page.locator('#announce').textContent()).includes('Replayed ' + longRID)) fail(`${at}: the replay was not announced`);
  await fits('the stream page with a result');
  await shot('stream-wide');

  step(`${at}: every pending row retried now, in one call, its result beside the control`);
  await page.getByRole('button', { name: 'Retry every pending row now' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Retry now' }).click();
  // The stream refuses everything, so a fire may hold it this instant:
  // the API then says to retry in a second, which is an answer too.
  const retried = page.locator('[data-result]', { hasText: /1 row is due now|being delivered right now/ });
  await retried.waitFor();
  await inView(retried, 'the retry\'s result');

  step(`${at}: disabling asks in red; replaying did not`);
  await page.getByRole('button', { name: 'Disable endpoint' }).click();
  const disableOk = page.getByRole('dialog').getByRole('button', { name: 'Disable' });
  if (!(await isRed(disableOk))) fail(`${at}: the confirmation of disabling is not red`);
  await page.getByRole('dialog').getByRole('button', { name: 'Cancel' }).click();

  step(`${at}: a result is not shown again after leaving the page and coming back`);
  await page.getByRole('navigation', { name: 'Breadcrumb' }).getByRole('link', { name: 'wide' }).click();
  await page.getByRole('heading', { name: 'Namespace wide' }).waitFor();
  await page.goBack();
  await page.getByRole('heading', { name: 'Endpoint ' + longEndpoint }).waitFor();
  await page.locator('#freshness[data-read-at]:not([data-read-at=""])').waitFor();
  if ((await page.locator('[data-result]').count()) !== 0) fail(`${at}: the replay's result came back with the page`);
  if ((await page.locator('#announce').textContent()) !== '') fail(`${at}: the announcement stayed after leaving the page`);

  if (phone) {
    // Once, as it takes the console's 20 s: the page's timer drops it.
    step(`${at}: a result goes by itself after a while`);
    await replay.click();
    await replayOk.click();
    await replayed.waitFor();
    await replayed.waitFor({ state: 'detached', timeout: 30000 });
    if ((await page.locator('#announce').textContent()) !== '') fail(`${at}: the announcement stayed after the result went`);
  }

  step(`${at}: the outcome of a 128-character id fits`);
  await go('#/ns/wide/outcomes/' + longRID, 'Outcome ' + longRID);
  await fits('the outcome page');
  await shot('outcome-wide');
}

// stacked checks that on a phone the table in box shows each row as a card:
// its cells one under another, each under the name of its column.
async function stacked(box, at) {
  const rows = await box.evaluate((el) => {
    const names = [...el.querySelectorAll('thead th')].map((th) => th.textContent);
    return [...el.querySelectorAll('tbody tr:not(.result)')].map((tr) => [...tr.cells].map((c, i) => ({
      top: c.getBoundingClientRect().top,
      label: getComputedStyle(c, '::before').content,
      want: JSON.stringify(names[i]),
    })));
  });
  if (!rows.length) fail(`${at}: the table has no rows to stack`);
  for (const cells of rows) {
    for (let i = 0; i < cells.length; i++) {
      if (cells[i].label !== cells[i].want) fail(`${at}: a stacked cell is labelled ${cells[i].label}, want ${cells[i].want}`);
      if (i > 0 && cells[i].top <= cells[i - 1].top) fail(`${at}: the cells of a row stand side by side, not one under another`);
    }
  }
}

// wideTable scrolls a table wider than its box sideways: its first column
// stays in view, opaque, over the cells passing under it, and a refresh
// keeps the scroll. No table of the scenario is wider than a 1280 px
// window, whose test (operatorWork) says so; at 200 % zoom that window
// lays pages out 640 CSS px wide, where the endpoints table is.
export async function wideTable(page, { step, longEndpoint }) {
  const at = 'at 1280 px zoomed to 200 % (640x800)';
  await page.setViewportSize({ width: 640, height: 800 });
  step(`${at}: a wide table's first column stays put as it scrolls sideways, and a refresh keeps the scroll`);
  await page.evaluate(() => {
    location.hash = '#/ns/wide';
  });
  await page.getByRole('heading', { name: 'Namespace wide', exact: true }).waitFor();
  const box = page.getByRole('region', { name: 'Endpoints, failing first' });
  await box.getByRole('link', { name: longEndpoint }).waitFor();
  const [sw, cw] = await box.evaluate((el) => [el.scrollWidth, el.clientWidth]);
  if (sw <= cw + 200) fail(`${at}: the endpoints table (${sw} px in ${cw}) is not wide enough to scroll, which this test needs`);
  const left = 200;
  await box.evaluate((el, l) => {
    el.scrollLeft = l;
  }, left);
  const sticks = () => box.evaluate((el) => {
    const edge = el.getBoundingClientRect().left + el.clientLeft;
    const out = [];
    for (const cell of el.querySelectorAll('thead th:first-child, tbody tr:not(.result) > :first-child')) {
      const r = cell.getBoundingClientRect();
      // What shows at the middle of the cell is the cell, not a cell
      // scrolled under it.
      const top = document.elementFromPoint(r.left + r.width / 2, r.top + Math.min(r.height / 2, 10));
      const bg = getComputedStyle(cell).backgroundColor;
      out.push({ off: Math.abs(r.left - edge), covered: !cell.contains(top), bg, text: cell.textContent.slice(0, 20) });
    }
    return out;
  });
  for (const c of await sticks()) {
    if (c.off > 1) fail(`${at}: the first column's cell ${c.text} scrolled ${c.off} px away from the table's edge`);
    if (c.covered) fail(`${at}: the first column's cell ${c.text} is covered by the cells scrolled under it`);
    if (!/^rgb\(/.test(c.bg)) fail(`${at}: the first column's cell ${c.text} has background ${c.bg}: the cells under it show through`);
  }
  // The page's own timer, twice: the table's sideways scroll stays.
  for (let i = 0; i < 2; i++) {
    const before = await page.locator('#freshness').getAttribute('data-read-at');
    await page.waitForFunction((b) => {
      const v = document.querySelector('#freshness')?.dataset.readAt;
      return v && v !== b;
    }, before, { timeout: 20000 });
  }
  const leftAfter = await box.evaluate((el) => el.scrollLeft);
  if (leftAfter !== left) fail(`${at}: the endpoints table scrolled from ${left} to ${leftAfter} px with a refresh`);
  await page.screenshot({ path: join(process.env.CONSOLE_SCREENSHOTS, 'namespace-scrolled-640.png'), fullPage: true });
}
