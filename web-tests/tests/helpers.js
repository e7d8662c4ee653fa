// Shared setup: Debian's Chromium through playwright-core (never a downloaded browser).
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';

export const BASE = process.env.LIKEWISE_URL || 'http://127.0.0.1:18080';
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'likewise-chromium-'));
  // A persistent context is the only way to pass our own --user-data-dir.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1100, height: 900 },
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** A fresh page signed in as `userId`, with the feed rendered. */
export async function openAs(context, userId) {
  const page = await context.newPage();
  await page.goto(`${BASE}/?as=${userId}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 15000 });
  return page;
}

/** A token for a seeded user (demo-only sign-in). */
export async function tokenFor(userId) {
  const r = await fetch(`${BASE}/demo/token?user_id=${userId}`);
  if (!r.ok) throw new Error(`token: HTTP ${r.status}`);
  return (await r.json()).token;
}

export async function apiAs(userId, method, path, body) {
  const token = await tokenFor(userId);
  const r = await fetch(`${BASE}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: HTTP ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** The first post card (not the viral one) whose heart is empty. */
export async function firstUnlikedCard(page) {
  const cards = page.locator('article[data-testid^="post-"]');
  const n = await cards.count();
  for (let i = 0; i < n; i++) {
    const card = cards.nth(i);
    const id = await card.getAttribute('data-testid');
    if (id === 'post-1001') continue;
    const hasCount = (await card.locator('[data-testid="like-count"]').count()) > 0;
    if (hasCount && (await card.getByTestId('like-button').getAttribute('aria-pressed')) === 'false') return card;
  }
  throw new Error('no unliked post with a visible count');
}

export function parseCount(text) {
  return Number(text.replace(/[^0-9]/g, ''));
}

export async function waitFor(fn, timeoutMs = 10000, what = 'condition') {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

/** axe-core's serious and critical violations on the page as it is now (or in `within`). */
export async function axeViolations(page, within = null) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async (sel) => {
    const r = await window.axe.run(sel ? { include: [sel] } : document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ')) }));
  }, within);
  return found.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/** A fresh page at `path` (`/moderate`, `/settings?as=7`) once it is ready. */
export async function openPage(context, path) {
  const page = await context.newPage();
  await page.goto(`${BASE}${path}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 15000 });
  return page;
}
