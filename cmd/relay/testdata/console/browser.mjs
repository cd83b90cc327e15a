// What every console run in Chromium shares: its environment, a browser of
// its own whose page fails the run on a script error, screenshots at the
// sizes operators use with axe-core on each, and the run's end, which
// cmd/relay's tests read: DONE, or the failures and exit status 1.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { audit } from './axe.mjs';

// The sizes operators use: a laptop's and a phone's.
export const viewports = [{ width: 1280, height: 800 }, { width: 390, height: 844 }];

// env is a variable the Go test must set.
export const env = (k) => {
  if (!process.env[k]) throw new Error(k + ' is not set');
  return process.env[k];
};

// open starts Chromium with a profile of its own, its page at viewport,
// and records in failures any uncaught script error or CSP violation.
export async function open(name, viewport) {
  const profile = mkdtempSync(join(tmpdir(), `relay-console-${name}-`));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  const failures = [];
  const page = ctx.pages()[0] || (await ctx.newPage());
  page.setDefaultTimeout(20000);
  page.on('pageerror', (e) => failures.push('page error: ' + e.message));
  return { ctx, page, failures, profile, viewport };
}

// shooter is shot(name): the page as it is, screenshot at every viewport
// into dir, and axe finding no violation at either; then the page is
// driven at its own size again. With fits, a page wider than the viewport
// fails the run too.
export const shooter = ({ page, viewport }, dir, { fits = false } = {}) => async (name) => {
  for (const vp of viewports) {
    await page.setViewportSize(vp);
    await page.screenshot({ path: join(dir, `${name}-${vp.width}.png`), fullPage: true });
    await audit(page, `${name} at ${vp.width}x${vp.height}`);
    if (fits) {
      const wider = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      if (wider > 0) throw new Error(`${name} at ${vp.width} px is ${wider} px wider than the viewport`);
    }
  }
  await page.setViewportSize(viewport);
};

// finish closes the browser and ends the process: DONE when nothing
// failed, else the failures on stderr and status 1.
export async function finish({ ctx, profile, failures }) {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
  if (failures.length) {
    console.error(failures.join('\n'));
    process.exit(1);
  }
  console.log('DONE');
  // An open stdin would keep node alive.
  process.exit(0);
}
