// What a token that is not an unbound admin's sees: drive.mjs runs this
// with a read-only token (outbox:read, no namespace) and an admin token
// bound to the namespace "other", whose one endpoint, ledger, is disabled
// with the outcome heldRID pending on it.

const fail = (msg) => {
  throw new Error(msg);
};

// The only controls a token that may change nothing finds in a page:
// refreshing it, and opening a namespace.
const readOnlyButtons = new Set(['Refresh now', 'Open']);

export async function tokenWork(page, { adminLink, boundLink, readLink, heldRID, stuck, delivered, longEndpoint, step, shot }) {
  const at = (hash) => new URL('/console/' + hash, adminLink).href;
  const go = async (hash, heading) => {
    await page.evaluate((h) => {
      location.hash = h;
    }, hash);
    await page.getByRole('heading', { name: heading, exact: true }).waitFor();
  };
  const noWriteControl = async (where) => {
    const buttons = await page.locator('main button').allInnerTexts();
    const write = buttons.filter((b) => !readOnlyButtons.has(b.trim()));
    if (write.length) fail(`${where}: a read-only token is offered ${write.join(', ')}`);
    const forms = await page.locator('main form:not(.inline)').count();
    if (forms) fail(`${where}: a read-only token is offered ${forms} forms`);
  };

  step('a read-only token opens on a page that asks for a namespace, not on a refusal');
  await page.goto(readLink);
  await page.getByRole('heading', { name: 'Open a namespace', exact: true }).waitFor();
  const alerts = page.locator('main [role=alert]');
  if (await alerts.count()) fail('the read-only token\'s first page shows an alert: ' + await alerts.first().innerText());
  if (await page.getByText('Forbidden').count()) fail('the read-only token\'s first page is a refusal');
  await shot('read-only-start');
  await page.getByLabel('Open a namespace').fill('acme');
  await page.getByRole('button', { name: 'Open', exact: true }).click();
  await page.getByRole('heading', { name: 'Namespace acme' }).waitFor();
  await page.locator('figure.chart-card').first().waitFor();
  await noWriteControl('the namespace page');
  await shot('read-only-namespace');
  // Its way back leads to the page that asks, which it may use.
  const top = page.getByRole('navigation', { name: 'Breadcrumb' }).getByRole('link', { name: 'Namespaces' });
  if ((await top.getAttribute('href')) !== '#/') fail('the read-only token\'s breadcrumb does not lead to its start');

  step('a read-only token sees the pending rows of a stream and no Replay, Disable or Recover');
  await go('#/ns/wide/endpoints/' + longEndpoint, 'Endpoint ' + longEndpoint);
  const pending = page.getByRole('region', { name: 'Pending rows in delivery order' });
  await pending.getByRole('rowheader').first().waitFor();
  const cols = await pending.getByRole('columnheader').allInnerTexts();
  if (cols.includes('Action')) fail('the read-only token\'s pending rows have an Action column: ' + cols);
  if (await page.getByRole('heading', { name: 'Recover' }).count()) fail('the read-only token is offered Recover');
  await noWriteControl('the stream page');
  await shot('read-only-stream');

  step('a read-only token reads an outcome and is offered no Resend');
  await go('#/ns/acme/outcomes/' + delivered, 'Outcome ' + delivered);
  await page.getByRole('heading', { name: 'Story per endpoint' }).waitFor();
  await noWriteControl('the outcome page');
  await shot('read-only-outcome');
  await go('#/nope', 'No such page');
  if ((await page.getByRole('link', { name: 'Open a namespace' }).getAttribute('href')) !== '#/') fail('the read-only token\'s unknown page leads nowhere it may go');
  await shot('read-only-missing');

  step('a namespace-bound token sees its namespace and no other');
  // Only links within other, or to nothing at all (the skip link).
  const foreignLinks = () => page.evaluate(() => [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href'))
    .filter((href) => href !== '#main' && !/^#\/ns\/other(\/|$|\?)/.test(href)));
  await page.goto(boundLink);
  await page.getByRole('heading', { name: 'Namespace other' }).waitFor();
  await page.getByRole('link', { name: 'ledger', exact: true }).first().waitFor();
  let foreign = await foreignLinks();
  if (foreign.length) fail('the bound token\'s namespace page links elsewhere: ' + foreign.join(' '));
  if (await page.locator('#search-ns').isVisible()) fail('the bound token is asked for a namespace to search');
  await shot('bound-namespace');
  // The start is its namespace, not a list it may not read.
  await page.evaluate(() => {
    location.hash = '#/';
  });
  await page.waitForURL(/#\/ns\/other$/);
  await page.getByRole('heading', { name: 'Namespace other' }).waitFor();

  step('a disabled endpoint\'s pending rows offer no Replay and say why');
  await go('#/ns/other/endpoints/ledger', 'Endpoint ledger');
  const held = page.getByRole('region', { name: 'Pending rows in delivery order' }).getByRole('row', { name: new RegExp(heldRID) });
  await held.waitFor();
  if (await held.getByRole('button').count()) fail('a disabled endpoint\'s row offers ' + await held.getByRole('button').allInnerTexts());
  await held.getByText('Not while disabled: enable the endpoint, or Enable and deliver').waitFor();
  await page.getByRole('button', { name: 'Enable endpoint' }).waitFor();
  // Its rows go in one step with the enable, not row by row.
  await page.getByRole('button', { name: 'Enable and deliver' }).waitFor();
  foreign = await foreignLinks();
  if (foreign.length) fail('the bound token\'s stream page links elsewhere: ' + foreign.join(' '));
  await shot('stream-disabled');

  step('a bound token finds an outcome of its namespace without naming it');
  await page.getByLabel('Reservation id').fill(heldRID);
  await page.getByRole('button', { name: 'Find outcome' }).click();
  await page.getByRole('heading', { name: 'Outcome ' + heldRID }).waitFor();
  foreign = await foreignLinks();
  if (foreign.length) fail('the bound token\'s outcome page links elsewhere: ' + foreign.join(' '));
  await shot('bound-outcome');

  step('another namespace is refused to a bound token, which is led back to its own');
  await page.goto(at('#/ns/acme'));
  await page.getByRole('alert').getByText('Forbidden').waitFor();
  if (await page.getByText(stuck).count()) fail('the bound token saw acme');
  if (await page.getByLabel('Open a namespace').count()) fail('the bound token is offered other namespaces to open');
  await page.getByRole('link', { name: 'go to namespace other' }).waitFor();
  foreign = await foreignLinks();
  if (foreign.length) fail('the bound token\'s refusal links elsewhere: ' + foreign.join(' '));
  await shot('forbidden');
}
