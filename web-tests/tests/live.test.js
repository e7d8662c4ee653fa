// The pages keep themselves current (a reader in another browser sees a moderator's decision,
// the queue and the insights panel refresh), and odd comments (very long, right-to-left,
// multi-line) and small screens do not break the layout. In Chromium, against `likewise demo`.
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, launch, openAs, openPage, apiAs, waitFor } from './helpers.js';

const MODERATOR = 9000;
let browser;
const pages = [];
async function track(p) { pages.push(await p); return pages[pages.length - 1]; }

before(async () => {
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

const LONG = 'x'.repeat(2200); // one unbroken word of the longest comment allowed
const RTL = 'مرحبا، هذه صورة جميلة جدا';
const LINES = 'first line\nsecond line\nthird line';

function fakeComment(id, text, extra = {}) {
  return {
    comment_id: String(id), post_id: '1003', author_id: '260', author_username: 'user260', parent_id: null,
    reply_to_user_id: null, text, status: 'visible', like_count: 0, reply_count: 0, viewer_has_liked: false,
    pinned: false, created_at: new Date().toISOString(), ...extra,
  };
}

function fakeQueueItem(id, text) {
  return { ...fakeComment(id, text, { status: 'pending' }), report_count: 0, held_by: 'classifier', appealed: false, appeal_message: null };
}

/** Answer the queue route from the server, changed by `edit(page, call)` (call counts from 1). */
async function editQueue(page, edit) {
  let calls = 0;
  await page.route('**/v1/moderation/queue*', async (route) => {
    const res = await route.fetch();
    const body = await res.json();
    calls += 1;
    edit(body, calls);
    await route.fulfill({ response: res, json: body });
  });
}

test("a moderator's decision reaches a reader in another browser within seconds, counts too", async () => {
  const reader = await launch(); // its own profile: no BroadcastChannel reaches it
  try {
    const text = `Seen from another device ${Date.now()}`;
    const c = await apiAs(261, 'POST', '/v1/posts/1004/comments', { text });
    await apiAs(262, 'POST', `/v1/comments/${c.comment_id}/reports`, { reason: 'spam' }); // queued, still shown
    const page = await openAs(reader.context, 50);
    const card = page.getByTestId('post-1004');
    await card.getByTestId('comments-button').click();
    await page.getByRole('button', { name: 'Newest' }).click();
    await page.locator('#comments li.comment', { hasText: text }).waitFor({ timeout: 5000 });
    await page.getByRole('button', { name: 'Close comments' }).click();
    // The card's count has caught up with the new comment.
    const shown = async () => Number((await card.getByTestId('comments-button').getAttribute('aria-label')).match(/\d+/)[0]);
    const server = async () => (await apiAs(50, 'GET', '/v1/posts/1004')).comment_count;
    await waitFor(async () => (await shown()) === (await server()), 8000, 'the count before');
    const before = await shown();
    await card.getByTestId('comments-button').click();
    await page.locator('#comments li.comment', { hasText: text }).waitFor({ timeout: 5000 });

    const mod = await track(openPage(browser.context, '/moderate'));
    await queueItem(mod, text).getByRole('button', { name: 'Hide' }).click();
    await page.locator('#comments li.comment', { hasText: text }).waitFor({ state: 'detached', timeout: 8000 });
    // The card's count settles on the server's, one less than before.
    await waitFor(async () => {
      const [a, b] = [await shown(), await server()];
      return a === b && a === before - 1;
    }, 8000, "the card's count to equal GET /v1/posts/1004");
  } finally {
    await reader.close();
  }
});

test('long, right-to-left and multi-line comments: wrapped, in their direction, lines kept (queue)', async () => {
  const page = await track(browser.context.newPage());
  await editQueue(page, (body) => {
    body.items.unshift(fakeQueueItem(990001, LONG), fakeQueueItem(990002, RTL), fakeQueueItem(990003, LINES));
  });
  await page.goto(`${BASE}/moderate`);
  await page.waitForSelector('body[data-ready="true"]');
  const width = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  assert.ok(width[0] <= width[1], `the page is ${width[0]} px wide in a ${width[1]} px window`);
  for (const id of ['990001', '990002', '990003']) {
    const q = page.getByTestId(`queue-item-${id}`).locator('.qtext');
    assert.equal(await q.getAttribute('dir'), 'auto');
    assert.equal(await q.evaluate((el) => getComputedStyle(el).whiteSpace), 'pre-wrap');
  }
  assert.equal(await page.getByTestId('queue-item-990002').locator('.qtext')
    .evaluate((el) => getComputedStyle(el).direction), 'rtl');
  const lines = page.getByTestId('queue-item-990003').locator('.qtext');
  assert.ok((await lines.boundingBox()).height > 40, 'three lines, not one');
  // Each item names its post: the seeded captions repeat.
  assert.match(await page.getByTestId('queue-item-990001').locator('.qhead').textContent(), /\(post 1003\)/);
});

test('long, right-to-left and multi-line comments: wrapped, in their direction, lines kept (sheet)', async () => {
  const page = await track(openAs(browser.context, 51));
  await page.route('**/v1/posts/1003/comments?*', async (route) => {
    if (route.request().method() !== 'GET') return route.continue();
    const res = await route.fetch();
    const body = await res.json();
    body.items.unshift(fakeComment(990011, LONG), fakeComment(990012, RTL), fakeComment(990013, LINES));
    return route.fulfill({ response: res, json: body });
  });
  await page.getByTestId('post-1003').getByTestId('comments-button').click();
  await page.getByTestId('comment-990011').waitFor();
  const w = await page.evaluate(() => {
    const list = document.getElementById('comments');
    return [list.scrollWidth, list.clientWidth, document.documentElement.scrollWidth, window.innerWidth];
  });
  assert.ok(w[0] <= w[1] && w[2] <= w[3], `the comments are ${w[0]} px wide in ${w[1]} px; the page ${w[2]} in ${w[3]}`);
  const text = (id) => page.getByTestId(`comment-${id}`).locator('.text');
  assert.equal(await text(990012).getAttribute('dir'), 'auto');
  assert.equal(await text(990012).evaluate((el) => getComputedStyle(el).direction), 'rtl');
  assert.equal(await text(990013).evaluate((el) => getComputedStyle(el).whiteSpace), 'pre-wrap');
  assert.ok((await text(990013).boundingBox()).height > 40, 'three lines, not one');
});

test('on a phone: the integrity table keeps its buttons on screen and the header is compact', async () => {
  const page = await track(browser.context.newPage());
  await page.setViewportSize({ width: 375, height: 740 });
  await page.goto(`${BASE}/moderate`);
  await page.waitForSelector('body[data-ready="true"]');
  const row = page.locator('tr[data-testid^="flag-"]').first();
  for (const name of [/^Confirm/, /^Clear/]) {
    const box = await row.getByRole('button', { name }).boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 375, `${name} at ${box.x}..${box.x + box.width}`);
  }
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 375), 'no sideways scrolling');
  const header = await page.locator('header.top').boundingBox();
  assert.ok(header.height <= 100, `the header takes ${header.height} px`);
  const feed = await track(browser.context.newPage());
  await feed.setViewportSize({ width: 375, height: 740 });
  await feed.goto(`${BASE}/?as=52`);
  await feed.waitForSelector('body[data-ready="true"]');
  const top = await feed.locator('header.top').boundingBox();
  assert.ok(top.height <= 100, `the feed's header takes ${top.height} px`);
});

test('integrity evidence under a second is shown in milliseconds', async () => {
  const page = await track(openPage(browser.context, '/moderate'));
  const flags = await apiAs(MODERATOR, 'GET', '/v1/moderation/integrity?limit=100');
  const ring = flags.items.find((f) => f.evidence?.span_seconds !== undefined);
  assert.ok(ring, 'a seeded lockstep ring');
  const row = page.getByTestId(`flag-${ring.user_id}`);
  const s = ring.evidence.span_seconds;
  const want = s < 1 ? `within ${Math.round(s * 1000)} ms` : `within ${Math.round(s)} s`;
  assert.match(await row.textContent(), new RegExp(want));
});

test('the queue says "100+" when more pages wait', async () => {
  const page = await track(browser.context.newPage());
  await editQueue(page, (body) => { body.next_cursor = body.next_cursor || 'more-pages'; });
  await page.goto(`${BASE}/moderate`);
  await page.waitForSelector('body[data-ready="true"]');
  assert.match(await page.locator('#queue-count').textContent(), /\d+ shown, \d+\+ awaiting a decision/);
  assert.equal(await page.locator('#queue-more').isVisible(), true);
});

test('the queue picks up new held comments, keeping the focus and a decision on its way', async () => {
  const page = await track(browser.context.newPage());
  await editQueue(page, (body, call) => {
    if (call > 1) body.items.push(fakeQueueItem(990021, 'Held just now, after the page loaded'));
  });
  let release;
  const gate = new Promise((r) => { release = r; });
  await page.route('**/v1/moderation/comments/*', async (route) => {
    await gate; // the decision stays on its way until the refresh has happened
    await route.fulfill({ json: { ...fakeComment(0, ''), comment_id: route.request().url().split('/').pop(), status: 'hidden' } });
  });
  await page.goto(`${BASE}/moderate`);
  await page.waitForSelector('body[data-ready="true"]');
  const items = page.locator('li.qitem');
  const decided = await items.nth(0).getAttribute('data-id');
  await items.nth(0).getByRole('button', { name: /^(Reject|Hide)/ }).click();
  const focused = await items.nth(1).getAttribute('data-id');
  await page.getByTestId(`queue-item-${focused}`).focus();
  await page.getByTestId('queue-item-990021').waitFor({ timeout: 10000 });
  assert.equal(await page.getByTestId(`queue-item-${decided}`).count(), 0, 'the decision on its way stays');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.id), focused, 'the focus stays');
  release();
});

test('a decision on a comment that no longer exists drops it with a message', async () => {
  const page = await track(openPage(browser.context, '/moderate'));
  await page.route('**/v1/moderation/comments/*', (route) =>
    route.fulfill({ status: 404, json: { error: 'not_found', message: 'no such comment' } }));
  const first = page.locator('li.qitem').first();
  const id = await first.getAttribute('data-id');
  const response = page.waitForResponse((r) => r.url().includes('/v1/moderation/comments/'));
  await first.getByRole('button', { name: 'Approve' }).click();
  await response;
  await page.getByRole('alert').waitFor({ state: 'visible' });
  assert.match(await page.getByRole('alert').textContent(), /no longer exists/);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await page.getByTestId(`queue-item-${id}`).count(), 0, 'not rolled back');
});

test('each decision replaces the last message rather than adding to it', async () => {
  const page = await track(openPage(browser.context, '/moderate'));
  let release;
  const gate = new Promise((r) => { release = r; });
  await page.route('**/v1/moderation/comments/*', async (route) => {
    await gate; // both decisions are on their way before either answers
    await route.fulfill({ json: { ...fakeComment(0, ''), comment_id: route.request().url().split('/').pop(), status: 'visible' } });
  });
  const answered = page.waitForResponse((r) => r.url().includes('/v1/moderation/comments/'));
  await page.locator('li.qitem').first().getByRole('button', { name: 'Approve' }).click();
  await page.locator('li.qitem').first().getByRole('button', { name: 'Approve' }).click();
  release();
  await answered;
  await waitFor(async () => {
    const said = await page.locator('#queue-count').textContent();
    return /Approved/.test(said) && (await page.evaluate(() => performance.getEntriesByType('resource')
      .filter((e) => e.name.includes('/v1/moderation/comments/')).length)) >= 2;
  }, 3000, 'both answers');
  await new Promise((r) => setTimeout(r, 200));
  const said = await page.locator('#queue-count').textContent();
  assert.equal(said.match(/Approved/g).length, 1, said);
});

test('the likes chart has numbers and says visibly when it counts only the latest likes', async () => {
  const page = await track(openAs(browser.context, 30)); // the author of post 1005
  await page.route('**/v1/posts/1005/likers*', (route) => route.fulfill({
    json: {
      items: Array.from({ length: 100 }, (_, i) => ({ user_id: String(5000 + i), username: `u${i}`, liked_at: new Date().toISOString() })),
      next_cursor: 'older',
    },
  }));
  const card = page.getByTestId('post-1005');
  await card.getByTestId('insights-button').click();
  const note = card.getByTestId('chart-note');
  await note.waitFor();
  assert.equal(await note.isVisible(), true);
  assert.match(await note.textContent(), /latest 2,000 likes only/);
  assert.match(await note.textContent(), /2,000 likes in the last hour/);
  assert.ok(await card.getByTestId('likes-chart').locator('text.count').count() >= 1, 'numbers on the bars');
});

test('an open insights panel refreshes itself', async () => {
  const page = await track(openAs(browser.context, 30));
  const card = page.getByTestId('post-1005');
  await card.getByTestId('insights-button').click();
  const likes = card.getByTestId('insights-likes');
  await likes.waitFor();
  const shown = async () => Number((await likes.textContent()).replace(/,/g, ''));
  const before = await shown();
  await apiAs(263, 'PUT', '/v1/posts/1005/like');
  await waitFor(async () => {
    const exact = (await apiAs(30, 'GET', '/v1/posts/1005/insights')).like_count;
    return exact > before && (await shown()) === exact;
  }, 12000, 'the panel to show the new like');
});
