// audit runs axe-core's rules (WCAG 2 A and AA and its best practices) on
// the page as it stands and throws on any violation, naming the rule and
// the elements. axe is evaluated through the DevTools protocol, which the
// console's Content-Security-Policy does not govern: the page loads
// nothing itself, and its CSP is still checked by every other step.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const source = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

export async function audit(page, where) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(source);
  const violations = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => `${v.id} (${v.impact}): ${v.help}: ` +
      v.nodes.slice(0, 3).map((n) => n.target.join(' ') + ' — ' + n.failureSummary.replace(/\s+/g, ' ')).join(' | '));
  });
  if (violations.length) throw new Error(`${where}: axe finds ${violations.length} violations:\n  ${violations.join('\n  ')}`);
}
