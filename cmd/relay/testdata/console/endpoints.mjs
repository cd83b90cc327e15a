// Drives the console's endpoint management in a real Chromium for
// cmd/relay's TestConsoleManagesEndpointsInChromium: an endpoint created,
// edited (its redacted header kept), tested, disabled, enabled, rotated
// and deleted from the page, and none of it offered to a read-only token.
// The Go test starts relay and the receivers, passes the links in the
// environment, and checks what the receivers got once this prints DONE.
import { env, finish, open, shooter } from './browser.mjs';
const adminLink = env('CONSOLE_ADMIN_LINK');
const readLink = env('CONSOLE_READ_LINK');
const shots = env('CONSOLE_SCREENSHOTS');
const ns = env('CONSOLE_NS');
const receiverURL = env('RECEIVER_URL');
const receiverSecret = env('RECEIVER_SECRET');
const width = Number(env('CONSOLE_WIDTH'));
const id = 'billing';

const fail = (msg) => {
  throw new Error(msg);
};
const step = (s) => console.log('STEP ' + s);

const run = await open('endpoints', { width, height: 900 });
const { ctx, page, failures } = run;
try {
  const origin = new URL(adminLink).origin;
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  // The refusals this run asks for on purpose: a bad edit (400) and the
  // deleted endpoint read back (404), each by its URL.
  const refusals = [];
  page.on('response', (r) => {
    if (r.status() >= 400) refusals.push(r.status() + ' ' + r.request().method() + ' ' + new URL(r.url()).pathname);
  });
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 40[04]/.test(m.text())) failures.push('console error: ' + m.text());
  });
  page.on('request', (r) => {
    if (!r.url().startsWith(origin)) failures.push('request outside relay: ' + r.url());
  });

  // Each state is kept as screenshots at both sizes, and axe finds no
  // violation in it at either; the page is driven at its own width again.
  const shot = shooter(run, shots);
  const go = async (hash, heading) => {
    await page.evaluate((h) => {
      location.hash = h;
    }, hash);
    await page.getByRole('heading', { name: heading, exact: true }).waitFor();
  };
  const inView = async (loc, what) => {
    const box = await loc.boundingBox();
    const vp = page.viewportSize();
    if (!box || box.y < 0 || box.y + Math.min(box.height, 40) > vp.height) fail(`${what} is out of view: ${JSON.stringify(box)}`);
  };
  const fits = async (where) => {
    const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    if (over > 0) fail(`${where} is ${over} px wider than the viewport`);
  };
  const isRed = (loc) => loc.evaluate((b) => b.classList.contains('danger'));
  // The endpoint as the API shows it, read with the admin token the
  // console holds.
  const api = (method, path, body) => page.evaluate(async ([m, p, b]) => {
    const res = await fetch(p, {
      method: m, headers: { Authorization: 'Bearer ' + sessionStorage.getItem('relay.token'), 'Content-Type': 'application/json' },
      body: b === undefined ? undefined : JSON.stringify(b),
    });
    return { status: res.status, body: await res.json().catch(() => null) };
  }, [method, path, body]);
  const endpoint = async () => {
    const r = await api('GET', `/v1/namespaces/${ns}/endpoints/${id}`);
    if (r.status !== 200) fail(`GET ${id}: ${r.status}`);
    return r.body;
  };
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  const held = () => page.evaluate(() => window.relayConsole.refresh());
  const dialog = page.getByRole('dialog');
  const button = (name) => page.locator('main').getByRole('button', { name, exact: true });

  step(`driven at ${width} px: a new endpoint from the namespace page`);
  await page.goto(adminLink);
  await page.getByRole('heading', { name: 'Namespaces', exact: true }).waitFor();
  await go('#/ns/' + ns, 'Namespace ' + ns);
  await button('New endpoint').click();
  const form = page.locator('form.endpoint-form');
  await form.waitFor();
  await page.getByLabel('Endpoint id').fill(id);
  if ((await held()) !== 'held') fail('a refresh went ahead while the new endpoint form held input');
  await page.getByLabel('URL', { exact: true }).fill(receiverURL);
  await page.getByLabel('Signature scheme').selectOption('standard-webhooks');
  await page.getByLabel('Secret', { exact: true }).fill(receiverSecret);
  await form.getByRole('checkbox', { name: 'committed', exact: true }).check();
  await page.getByLabel('Headers').fill('authorization: Bearer hunter2\nx-tenant: acme');
  await page.getByLabel('Timeout (ms)').fill('2000');
  await page.getByLabel('Calls at once').fill('2');
  await page.getByLabel('Rate limit (calls/s)').fill('50');
  await page.getByLabel('Headers').focus();
  await fits('the new endpoint form');
  await shot('endpoint-new');
  // The form outlived the refreshes the screenshots waited through.
  if ((await page.getByLabel('Endpoint id').inputValue()) !== id) fail('the new endpoint form lost its id');
  await form.getByRole('button', { name: 'Create endpoint' }).click();
  await page.getByRole('heading', { name: 'Endpoint ' + id, exact: true }).waitFor();
  const created = page.locator('[data-note]', { hasText: `Created ${id}.` });
  await created.waitFor();
  await inView(created, 'the creation\'s note');
  if (!(await page.locator('#announce').textContent()).includes(`Created ${id}.`)) fail('the creation was not announced');
  let e = await endpoint();
  if (e.scheme !== 'standard-webhooks' || !same(e.kinds, ['committed']) || e.timeout_ms !== 2000 || e.max_in_flight !== 2 || e.rate_limit !== 50 ||
    !same(e.headers, { authorization: '[redacted]', 'x-tenant': 'acme' }) || e.url !== receiverURL || !e.enabled) fail('created ' + JSON.stringify(e));
  // The page shows what it was created with, the secret header redacted.
  for (const text of ['standard-webhooks', 'committed', 'authorization: [redacted]', 'x-tenant: acme', '2,000 ms', '50 calls/s']) {
    await page.locator('dl.settings dd', { hasText: text }).first().waitFor();
  }
  if (await page.locator('dl.settings').getByText('hunter2').count()) fail('the settings show a secret header\'s value');
  // The secret was given: relay made none to show.
  if (await page.locator('[data-key=secret]').count()) fail('a secret is shown that relay did not make');

  step('the edit form is prefilled, survives a refresh, and keeps the redacted header');
  await button('Edit endpoint').click();
  await form.waitFor();
  if ((await page.getByLabel('URL', { exact: true }).inputValue()) !== receiverURL) fail('the edit form\'s URL is not the endpoint\'s');
  if ((await page.getByLabel('Signature scheme').inputValue()) !== 'standard-webhooks') fail('the edit form\'s scheme is not the endpoint\'s');
  if (!(await form.getByRole('checkbox', { name: 'committed', exact: true }).isChecked())) fail('the edit form does not check the endpoint\'s kind');
  if ((await page.getByLabel('Timeout (ms)').inputValue()) !== '2000') fail('the edit form\'s timeout is not the endpoint\'s');
  if ((await page.getByLabel('Rate limit (calls/s)').inputValue()) !== '50') fail('the edit form\'s rate limit is not the endpoint\'s');
  const headers = await page.getByLabel('Headers').inputValue();
  if (headers !== 'authorization: [redacted]\nx-tenant: acme') fail('the edit form\'s headers are ' + JSON.stringify(headers));
  await page.getByLabel('Headers').fill('authorization: [redacted]\nx-tenant: acme-2');
  await page.getByLabel('Timeout (ms)').fill('3000');
  await form.getByRole('checkbox', { name: 'expired', exact: true }).check();
  for (let i = 0; i < 3; i++) {
    if ((await held()) !== 'held') fail('a refresh went ahead while the edit form held input');
  }
  await shot('endpoint-edit');
  if ((await page.getByLabel('Timeout (ms)').inputValue()) !== '3000') fail('a refresh emptied the edit form');
  await form.getByRole('button', { name: 'Save changes' }).click();
  const saved = page.locator('[data-result]', { hasText: `Saved ${id}.` });
  await saved.waitFor();
  await inView(saved, 'the edit\'s result');
  if (await form.count()) fail('the edit form stayed open after saving');
  e = await endpoint();
  if (!same(e.headers, { authorization: '[redacted]', 'x-tenant': 'acme-2' }) || e.timeout_ms !== 3000 || !same(e.kinds, ['committed', 'expired']) ||
    e.rate_limit !== 50 || e.max_in_flight !== 2) fail('edited ' + JSON.stringify(e));

  step('a bad edit is refused beside the form, and changes nothing');
  await button('Edit endpoint').click();
  await page.getByLabel('Headers').fill('x-tenant acme');
  await form.getByRole('button', { name: 'Save changes' }).click();
  const refused = form.locator('[data-result].problem');
  await refused.getByText('Headers, line 1: write a header as name: value.').waitFor();
  await inView(refused, 'the refused edit');
  // What the API refuses is shown as it says it.
  await page.getByLabel('Headers').fill('authorization: [redacted]\nx-tenant: acme-2');
  await page.getByLabel('Timeout (ms)').fill('999');
  await form.getByRole('button', { name: 'Save changes' }).click();
  await refused.getByText(/timeout_ms must be 1000 to 10000/).waitFor();
  await inView(refused, 'the edit the API refused');
  await form.getByRole('button', { name: 'Cancel' }).click();
  await form.waitFor({ state: 'detached' });
  if (!same((await endpoint()).headers, e.headers)) fail('a refused edit changed the headers');

  step('a test outcome is sent to this endpoint, and its attempt shows at once');
  await button('Send a test outcome').click();
  const sendOk = dialog.getByRole('button', { name: 'Send test' });
  if (await isRed(sendOk)) fail('the confirmation of a test is red');
  await sendOk.click();
  const tested = page.locator('[data-result]', { hasText: /^Sent test relay\.endpoint\.test\.billing\.[0-9]+: the attempt was answered HTTP 204 in [0-9,]+ ms\.$/ });
  await tested.waitFor();
  await inView(tested, 'the test\'s result');
  const story = page.locator('section.test-story');
  await story.getByText('delivered', { exact: true }).waitFor();
  await story.getByText(/^Attempt answered .* in [0-9,]+ ms, HTTP 204$/).waitFor();
  await fits('the endpoint page with a test');
  await shot('endpoint-tested');

  step('disable and enable through their own controls');
  await button('Disable endpoint').click();
  await dialog.getByRole('button', { name: 'Disable' }).click();
  await page.locator('[data-result]', { hasText: `${id} is now disabled.` }).waitFor();
  await page.locator('.facts .badge', { hasText: 'disabled' }).waitFor();
  if (await button('Send a test outcome').count()) fail('a disabled endpoint offers a test, which would wait');
  if ((await endpoint()).enabled) fail('the endpoint is still enabled');
  await button('Enable endpoint').click();
  await dialog.getByRole('button', { name: 'Enable' }).click();
  await page.locator('[data-result]', { hasText: `${id} is now enabled.` }).waitFor();
  await button('Send a test outcome').waitFor();
  if (!(await endpoint()).enabled) fail('the endpoint is still disabled');

  step('rotating the secret shows the new one once, copyable, and keeps the rest');
  await button('Rotate secret').click();
  const rotateOk = dialog.getByRole('button', { name: 'Rotate' });
  if (await isRed(rotateOk)) fail('the confirmation of a rotation is red');
  await rotateOk.click();
  const box = page.locator('[data-key=secret]');
  await box.waitFor();
  await inView(box, 'the new secret');
  const secret = await box.locator('code').innerText();
  if (!/^whsec_[A-Za-z0-9+/]{43}=$/.test(secret) || secret === receiverSecret) fail('the new secret is ' + secret);
  await box.getByRole('button', { name: 'Copy' }).click();
  await box.getByText('Copied.').waitFor();
  if ((await page.evaluate(() => navigator.clipboard.readText())) !== secret) fail('Copy did not copy the secret');
  if ((await held()) !== 'refreshed') fail('the page does not refresh while a secret is shown');
  if ((await box.locator('code').innerText()) !== secret) fail('a refresh dropped the new secret');
  e = await endpoint();
  if (!same(e.headers, { authorization: '[redacted]', 'x-tenant': 'acme-2' }) || e.timeout_ms !== 3000 || !same(e.kinds, ['committed', 'expired']) || !e.enabled) {
    fail('rotated ' + JSON.stringify(e));
  }
  await shot('endpoint-rotated');
  // The receiver still holds the previous secret, which still signs.
  await button('Send a test outcome').click();
  await dialog.getByRole('button', { name: 'Send test' }).click();
  await page.locator('[data-result]', { hasText: /^Sent test .*: the attempt was answered HTTP 204/ }).waitFor();
  if (await box.count() === 0) fail('the new secret went with the next action; it goes when dismissed or left');
  await go('#/ns/' + ns, 'Namespace ' + ns);
  await go(`#/ns/${ns}/endpoints/${id}`, 'Endpoint ' + id);
  if (await page.locator('[data-key=secret]').count()) fail('the new secret is shown again after leaving the page');
  if (await page.locator('section.test-story').count()) fail('the last test is shown again after leaving the page');

  step('delete, forced, says how many pending rows it drops');
  await button('Disable endpoint').click();
  await dialog.getByRole('button', { name: 'Disable' }).click();
  await page.locator('[data-result]', { hasText: `${id} is now disabled.` }).waitFor();
  const now = Date.now();
  for (const rid of ['d-1', 'd-2', 'd-3']) {
    const r = await api('POST', `/v1/namespaces/${ns}/outcomes`, {
      reservation_id: rid, repository: 'acme/widgets', occurred_unix_ms: now, committed: {},
    });
    if (r.status !== 202) fail(`ingest ${rid}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  await button('Delete endpoint').click();
  await dialog.getByText(`Delete ${id}? Its 3 pending rows are dropped and never delivered.`).waitFor();
  const deleteOk = dialog.getByRole('button', { name: 'Delete' });
  if (!(await isRed(deleteOk))) fail('the confirmation of a delete is not red');
  await shot('endpoint-delete');
  await deleteOk.click();
  await page.getByRole('heading', { name: 'Namespace ' + ns, exact: true }).waitFor();
  const gone = page.locator('[data-note]', { hasText: `Deleted ${id}: 3 pending rows dropped.` });
  await gone.waitFor();
  await inView(gone, 'the delete\'s note');
  if (await page.locator('main table').getByRole('link', { name: id, exact: true }).count()) fail('the deleted endpoint is still listed');
  if ((await api('GET', `/v1/namespaces/${ns}/endpoints/${id}`)).status !== 404) fail('the endpoint was not deleted');
  await fits('the namespace page after a delete');
  await shot('endpoint-deleted');

  step('rotating a v1a key pair shows the new public key');
  const keys = await api('PUT', `/v1/namespaces/${ns}/endpoints/keys`, { url: receiverURL, scheme: 'standard-webhooks-v1a', kinds: ['aborted'] });
  if (keys.status !== 201) fail(`PUT keys: ${keys.status}`);
  await go(`#/ns/${ns}/endpoints/keys`, 'Endpoint keys');
  await button('Rotate key pair').click();
  await dialog.getByRole('button', { name: 'Rotate' }).click();
  const pub = page.locator('[data-key=secret]');
  await pub.getByRole('heading', { name: 'New public key of keys' }).waitFor();
  const shown = await pub.locator('code').innerText();
  const after = (await api('GET', `/v1/namespaces/${ns}/endpoints/keys`)).body;
  if (!shown.startsWith('whpk_') || shown === keys.body.public_key || shown !== after.public_key) {
    fail(`the rotated public key shown is ${shown}, was ${keys.body.public_key}, now ${after.public_key}`);
  }
  await pub.getByRole('button', { name: 'Done, hide it' }).click();
  await pub.waitFor({ state: 'detached' });

  step('a read-only token is offered none of it');
  await page.goto(readLink);
  await page.getByRole('heading', { name: 'Open a namespace', exact: true }).waitFor();
  for (const [hash, heading] of [['#/ns/' + ns, 'Namespace ' + ns], [`#/ns/${ns}/endpoints/watch`, 'Endpoint watch']]) {
    await go(hash, heading);
    await page.locator('#freshness[data-read-at]:not([data-read-at=""])').waitFor();
    const buttons = (await page.locator('main button').allInnerTexts()).map((b) => b.trim()).filter((b) => b !== 'Refresh now' && b !== 'Open');
    if (buttons.length) fail(`${heading}: a read-only token is offered ${buttons.join(', ')}`);
    if (await page.locator('form.endpoint-form').count()) fail(`${heading}: a read-only token is offered the endpoint form`);
  }
  const want = [`400 PUT /v1/namespaces/${ns}/endpoints/${id}`, `404 GET /v1/namespaces/${ns}/endpoints/${id}`];
  if (!same(refusals, want)) fail(`refused ${JSON.stringify(refusals)}, want ${JSON.stringify(want)}`);
} catch (e) {
  failures.push(e.stack || String(e));
}
await finish(run);
