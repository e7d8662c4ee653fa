// The moderator's page, the author's insights and the notification settings, in Chromium,
// against a running `likewise demo` (its seeded world holds a comment of every `held_by`
// reason, an appeal and a flagged like farm). Screenshots go to docs/img/ for the README.
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, openAs, openPage, apiAs, axeViolations, waitFor } from './helpers.js';

const IMG = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'img');
const MODERATOR = 9000;
let browser;
const pages = [];
async function track(p) { pages.push(await p); return pages[pages.length - 1]; }

before(async () => {
  mkdirSync(IMG, { recursive: true });
  browser = await launch();
});
afterEach(async () => {
  for (const p of pages.splice(0)) await p.close().catch(() => {});
});
after(async () => {
  await browser?.close();
});

function queueItem(page, text) {
  return page.locator('li.qitem', { hasText: text });
}

test('every page has no serious or critical axe-core violations', async () => {
  const feed = await track(openAs(browser.context, 1));
  await feed.getByTestId('post-1002').getByTestId('insights-button').click();
  await feed.getByTestId('post-1002').getByTestId('insights-likes').waitFor();
  await feed.getByTestId('notifications').click();
  assert.deepEqual(await axeViolations(feed), [], 'the feed, an insights panel and the notifications');
  await feed.getByTestId('notifications').click();
  await feed.getByTestId('post-1002').getByTestId('comments-button').click();
  await feed.locator('#comments li.comment').first().waitFor();
  assert.deepEqual(await axeViolations(feed, '#sheet'), [], 'the comments sheet');
  const mod = await track(openPage(browser.context, '/moderate'));
  assert.deepEqual(await axeViolations(mod), [], 'the moderator page');
  const settings = await track(openPage(browser.context, '/settings?as=5'));
  assert.deepEqual(await axeViolations(settings), [], 'the settings page');
});

test('icons are inline SVG with accessible names, no emoji glyphs', async () => {
  const page = await track(openAs(browser.context, 1));
  const bell = page.getByTestId('notifications');
  assert.equal(await bell.locator('svg[data-icon="bell"]').count(), 1);
  assert.match(await bell.getAttribute('aria-label'), /^Notifications/);
  const card = page.getByTestId('post-1003');
  assert.equal(await card.getByTestId('comments-button').locator('svg[data-icon="comment"]').count(), 1);
  assert.match(await card.getByTestId('comments-button').getAttribute('aria-label'), /^Comments \(\d+\)$/);
  assert.equal(await card.getByRole('img').locator('svg[data-icon="image"]').count(), 1);
  assert.match(await card.getByRole('img').getAttribute('aria-label'), /double-tap to like/);
  // No pictographs left in the page's text (they show as empty boxes without an emoji font).
  const text = await page.evaluate(() => document.body.innerText);
  assert.doesNotMatch(text, /\p{Extended_Pictographic}/u);
});

test('a moderator approves a held comment and a reader sees it appear live', async () => {
  const text = 'Honestly the old version looked better'; // held by five reports on post 1006
  const reader = await track(openAs(browser.context, 50));
  await reader.getByTestId('post-1006').getByTestId('comments-button').click();
  await reader.getByRole('button', { name: 'Newest' }).click();
  await reader.locator('#comments li.comment').first().waitFor();
  assert.equal(await reader.locator('#comments li.comment', { hasText: text }).count(), 0, 'held: not shown');

  const mod = await track(openPage(browser.context, '/moderate'));
  await mod.screenshot({ path: join(IMG, 'moderate.png') });
  const item = queueItem(mod, text);
  assert.match(await item.getByTestId('held-by').textContent(), /Reports/);
  assert.match(await item.textContent(), /5 reports/);
  await item.getByRole('button', { name: 'Approve' }).click();
  assert.equal(await queueItem(mod, text).count(), 0, 'optimistic: gone at once');
  await reader.locator('#comments li.comment', { hasText: text }).waitFor({ timeout: 5000 });
  // The card's count trails the decision by up to a second, then settles on the server's.
  const button = reader.getByTestId('post-1006').getByTestId('comments-button');
  await waitFor(async () => {
    const shown = Number((await button.getAttribute('aria-label')).match(/\d+/)[0]);
    return shown === (await apiAs(50, 'GET', '/v1/posts/1006')).comment_count;
  }, 6000, "the card's count to equal GET /v1/posts/1006");
});

test('a refused decision comes back with a message', async () => {
  const text = 'FREE FOLLOWERS'; // held by the classifier
  const mod = await track(openPage(browser.context, '/moderate'));
  let release;
  const gate = new Promise((r) => { release = r; });
  await mod.route('**/v1/moderation/comments/*', async (route) => {
    await gate;
    await route.fulfill({ status: 503, contentType: 'application/json', body: '{"error":"unavailable","message":"try later"}' });
  });
  await queueItem(mod, text).getByRole('button', { name: 'Reject' }).click();
  assert.equal(await queueItem(mod, text).count(), 0, 'optimistic: gone at once');
  release();
  await queueItem(mod, text).waitFor({ timeout: 5000 });
  const toast = mod.getByRole('alert');
  await toast.waitFor({ state: 'visible' });
  assert.match(await toast.textContent(), /Couldn't reject the comment: try later/);
  const queue = await apiAs(MODERATOR, 'GET', '/v1/moderation/queue?limit=100');
  assert.ok(queue.items.some((i) => i.text.startsWith(text)), 'still awaiting a decision');
});

test('filters and the keyboard: reject an appeal', async () => {
  const mod = await track(openPage(browser.context, '/moderate'));
  await mod.getByLabel('Appealed only').check();
  const items = mod.locator('li.qitem');
  assert.equal(await items.count(), 1);
  const appeal = items.first();
  assert.match(await appeal.textContent(), /Appeal: “It was a friendly joke/);
  assert.match(await appeal.getByTestId('held-by').textContent(), /Moderator/);
  const id = await appeal.getAttribute('data-id');
  await mod.getByLabel('Appealed only').uncheck();
  await mod.getByLabel('Reason').selectOption('hidden_words');
  assert.equal(await items.count(), 1);
  assert.match(await items.first().textContent(), /Spoiler/);
  await mod.getByLabel('Reason').selectOption('');
  await mod.getByLabel('Appealed only').check();
  // Keyboard only: focus the comment, press "r" (reject the appeal).
  await mod.getByLabel('Appealed only').focus();
  await mod.keyboard.press('Tab'); // the count is not focusable: next is the comment
  assert.equal(await mod.evaluate(() => document.activeElement.dataset.id), id);
  await mod.keyboard.press('r');
  assert.equal(await items.count(), 0);
  await waitFor(async () => {
    const q = await apiAs(MODERATOR, 'GET', '/v1/moderation/queue?limit=100');
    return !q.items.some((i) => i.comment_id === id);
  }, 5000, 'the appeal to be decided');
  // Rejected: still hidden from readers.
  const c = await apiAs(50, 'GET', '/v1/posts/1009/comments?order=newest&limit=100');
  assert.ok(!c.items.some((x) => x.comment_id === id));
});

test('an integrity flag is confirmed in one click', async () => {
  const mod = await track(openPage(browser.context, '/moderate'));
  const row = mod.locator('tr[data-testid^="flag-"]').first();
  await row.waitFor();
  const user = (await row.getAttribute('data-testid')).replace('flag-', '');
  assert.match(await row.textContent(), /lockstep ring/);
  await row.getByRole('button', { name: /^Confirm/ }).click();
  assert.equal(await row.getByTestId('decision').textContent(), 'Confirmed');
  await waitFor(async () => {
    const f = await apiAs(MODERATOR, 'GET', '/v1/moderation/integrity?limit=100');
    return f.items.find((x) => x.user_id === user)?.decision === 'confirm';
  }, 5000, 'the verdict');
});

test("the author panel shows the insights route's exact count, also when hidden from others", async () => {
  // Post 1005 hides its like count; user 30 wrote it.
  const other = await apiAs(31, 'GET', '/v1/posts/1005');
  assert.equal(other.like_count, null);
  const page = await track(openAs(browser.context, 30));
  const card = page.getByTestId('post-1005');
  await card.getByTestId('insights-button').click();
  await card.getByTestId('insights-likes').waitFor();
  const insights = await apiAs(30, 'GET', '/v1/posts/1005/insights');
  assert.equal(Number((await card.getByTestId('insights-likes').textContent()).replace(/,/g, '')), insights.like_count);
  assert.equal(Number(await card.getByTestId('insights-comments').textContent()), insights.comment_count);
  const chart = card.getByTestId('likes-chart');
  assert.equal(Number(await chart.getAttribute('data-total')), insights.like_count, 'every like is from the last hour');
  assert.match(await chart.getAttribute('aria-label'), /^Likes in the last hour/);
  assert.match(await card.getByTestId('insights-trending').textContent(), /^#\d+$|not in the top 100/);
  await card.screenshot({ path: join(IMG, 'insights.png') });
  // No panel on someone else's post.
  assert.equal(await page.getByTestId('post-1003').getByTestId('insights-button').count(), 0);
});

test('alice sees the comments held on her post in her panel', async () => {
  const page = await track(openAs(browser.context, 1));
  const card = page.getByTestId('post-1002');
  await card.getByTestId('insights-button').press('Enter'); // keyboard operable
  await card.getByTestId('insights-held').waitFor();
  // mallory is restricted on alice's posts (the hidden-word one is not shown to her).
  assert.ok(Number(await card.getByTestId('insights-held').textContent()) >= 1);
});

test('muting likes in the settings: a like does not notify, and turning it on does not replay it', async () => {
  // User 18 wrote post 1009.
  const notified = async () => {
    const n = await apiAs(18, 'GET', '/v1/me/notifications?limit=100');
    return n.items.find((x) => x.kind === 'post_liked' && x.post_id === '1009') || null;
  };
  const page = await track(openPage(browser.context, '/settings?as=18'));
  const likes = page.getByRole('group', { name: 'Likes on your posts' });
  await likes.getByLabel('Off').check();
  await page.getByText('Saved.').waitFor();
  assert.equal((await apiAs(18, 'GET', '/v1/me/notification-settings')).post_liked, 'off');
  const before = await notified();
  await apiAs(201, 'PUT', '/v1/posts/1009/like');
  await new Promise((r) => setTimeout(r, 2500)); // past the hold window (1 s in web-tests/run.sh)
  assert.deepEqual(await notified(), before, 'a muted like does not notify');

  await page.reload();
  await page.waitForSelector('body[data-ready="true"]');
  assert.equal(await likes.getByLabel('Off').isChecked(), true, 'the setting is kept');
  await likes.getByLabel('Everyone').check();
  await page.getByText('Saved.').waitFor();
  await page.screenshot({ path: join(IMG, 'settings.png') });
  await apiAs(202, 'PUT', '/v1/posts/1009/like');
  const after = await waitFor(async () => {
    const n = await notified();
    return n && n.updated_at !== before?.updated_at ? n : null;
  }, 10000, 'the like to notify');
  assert.equal(after.actor_count, (before?.actor_count ?? 0) + 1, 'only the like made while on');
});

test('a refused setting rolls back with a message', async () => {
  const page = await track(openPage(browser.context, '/settings?as=19'));
  let release;
  const gate = new Promise((r) => { release = r; });
  await page.route('**/v1/me/notification-settings', async (route) => {
    if (route.request().method() !== 'PUT') return route.continue();
    await gate;
    return route.fulfill({ status: 500, contentType: 'application/json', body: '{"error":"internal","message":"boom"}' });
  });
  const replies = page.getByRole('group', { name: 'Replies to your comments' });
  assert.equal(await replies.getByLabel('Everyone').isChecked(), true);
  await replies.getByLabel('Off').click();
  assert.equal(await replies.getByLabel('Off').isChecked(), true, 'optimistic: checked at once');
  release();
  await waitFor(async () => replies.getByLabel('Everyone').isChecked(), 5000, 'the rollback');
  assert.match(await page.getByRole('alert').textContent(), /Couldn't save the setting/);
  assert.equal((await apiAs(19, 'GET', '/v1/me/notification-settings')).replied, 'all');
});
