// Drives the console's namespaces page beside 2,000 namespaces for
// cmd/relay's TestConsoleFleetInChromium: the true failing count, though
// the failing namespaces lie beyond the first 1,000; the namespace an
// operator disabled listed apart from the failing; the prefix search.
import { join } from 'node:path';
import { audit } from './axe.mjs';
import { env, finish, open, viewports } from './browser.mjs';
const adminLink = env('CONSOLE_ADMIN_LINK');
const shots = env('CONSOLE_SCREENSHOTS');
const failingNames = env('CONSOLE_FAILING').split(',').sort();
const disabledName = env('CONSOLE_DISABLED');
const step = (s) => console.log('STEP ' + s);

const run = await open('fleet', viewports[0]);
const { page, failures } = run;
try {
  page.on('console', (m) => { if (m.type() === 'error') failures.push('console error: ' + m.text()); });

  step('the figures count every failing namespace, and the disabled one apart');
  await page.goto(adminLink);
  await page.getByRole('heading', { name: 'Namespaces', exact: true }).waitFor();
  const figure = async (key) => (await page.locator(`[data-key="${key}"]`).innerText()).trim();
  if ((await figure('fleet-failing')) !== '3') throw new Error('failing namespaces shown ' + (await figure('fleet-failing')) + ', want 3');
  if ((await figure('fleet-disabled')) !== '1') throw new Error('disabled namespaces shown ' + (await figure('fleet-disabled')) + ', want 1');

  step('the failing table lists exactly the three, though they lie beyond the first 1,000');
  const rowsOf = async (caption) => {
    const t = page.locator('table', { has: page.locator('caption', { hasText: caption }) });
    return (await t.locator('tbody th').allInnerTexts()).sort();
  };
  const failing = await rowsOf('Namespaces with a failing endpoint');
  if (failing.join(',') !== failingNames.join(',')) throw new Error('failing table ' + failing + ', want ' + failingNames);
  if (failing.includes(disabledName)) throw new Error('the namespace an operator disabled is listed failing');

  step('the namespace an operator disabled is listed apart, not failing');
  const disabled = await rowsOf('Namespaces with an endpoint disabled by an operator');
  if (disabled.join(',') !== disabledName) throw new Error('disabled table ' + disabled + ', want ' + disabledName);
  for (const vp of viewports) {
    await page.setViewportSize(vp);
    await page.screenshot({ path: join(shots, `fleet-${vp.width}.png`), fullPage: true });
    // The figures and the two lists, as the viewport shows them first.
    await page.screenshot({ path: join(shots, `fleet-${vp.width}-top.png`) });
    await audit(page, `fleet at ${vp.width}x${vp.height}`);
  }
  await page.setViewportSize(viewports[0]);

  step('the prefix search narrows the lists, the figures still count them all');
  const target = failingNames[0];
  await page.getByLabel('Namespaces starting').fill(target);
  await page.getByRole('button', { name: 'Search' }).click();
  await page.getByRole('heading', { name: `All starting “${target}”, a page at a time` }).waitFor();
  const all = await rowsOf('Namespaces, failing first');
  if (all.join(',') !== target) throw new Error('search for ' + target + ' lists ' + all);
  if ((await rowsOf('Namespaces with a failing endpoint')).join(',') !== target) throw new Error('the failing table is not narrowed to ' + target);
  if ((await figure('fleet-failing')) !== '3') throw new Error('the search changed the fleet figure');
  await page.screenshot({ path: join(shots, 'fleet-search-1280.png'), fullPage: true });
  await audit(page, 'fleet search at 1280x800');
} catch (e) {
  failures.push(e.stack || String(e));
}
await finish(run);
