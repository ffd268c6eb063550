import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type Browser, chromium, type Page } from 'playwright-core';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOTSTRAP } from '../services/control/test/control-service.js';
import { forkWorld, type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

/**
 * The console (packages/console, docs/adr/0044) in Debian's chromium, driven by playwright-core,
 * against the three services on free ports: every step through the page, checked through the API.
 * Each page is screenshot into .test-output/console/ and checked by axe-core.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUT = `${ROOT}.test-output/console`;
const CHROMIUM = process.env.ONTO_CHROMIUM ?? '/usr/bin/chromium';
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const ORDER = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', required: true, indexed: true },
    status: { type: 'string' },
  },
};
const SHIP = {
  displayName: 'Ship an order',
  parameters: { order: { type: 'string', required: true } },
  edits: [
    { op: 'modifyObject', objectType: 'Order', pk: { param: 'order' }, values: { status: { value: 'shipped' } } },
  ],
};

describe('the console in a browser', () => {
  let s: IntelligenceStack;
  let browser: Browser;
  let page: Page;
  let base: string;
  let urls: { dataUrl: string; intelligenceUrl: string };

  /** The page as it is: a screenshot, and axe-core finding no serious or critical violation. */
  const check = async (name: string) => {
    await page.screenshot({ path: `${OUT}/${name}.png`, fullPage: true });
    await page.addScriptTag({ path: AXE });
    const violations = await page.evaluate(async () => {
      const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: Array<Record<string, unknown>> }> } })
        .axe;
      const result = await axe.run();
      return result.violations
        .filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => ({ id: v.id, help: v.help, nodes: (v.nodes as Array<{ html: string }>).map((n) => n.html) }));
    });
    expect(violations, `${name}: ${JSON.stringify(violations, null, 1)}`).toEqual([]);
  };

  const object = async (world: string, pk: string) =>
    (await s.dataCall('GET', `/v1/worlds/${world}/objects/Order/${pk}`)).json().properties;

  beforeAll(async () => {
    // The build of the sources as they are (esbuild: well under a second).
    await promisify(execFile)(process.execPath, [`${ROOT}packages/console/build.mjs`]);
    mkdirSync(OUT, { recursive: true });
    const [controlPort, dataPort, intelligencePort] = [await freePort(), await freePort(), await freePort()];
    base = `http://127.0.0.1:${controlPort}`;
    urls = { dataUrl: `http://127.0.0.1:${dataPort}`, intelligenceUrl: `http://127.0.0.1:${intelligencePort}` };
    const pool = { DB_POOL_MAX: '5', POSITION_ANNOUNCE_MS: '200' };
    s = await intelligenceStack({
      partitions: 1,
      controlEnv: {
        DB_POOL_MAX: '5',
        ONTO_DATA_URL: urls.dataUrl,
        ONTO_INTELLIGENCE_URL: urls.intelligenceUrl,
      },
      // The webhook receiver of the last step listens on 127.0.0.1, which data refuses unless allowed.
      dataEnv: { ...pool, ONTO_CONSOLE_ORIGIN: base, ONTO_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' },
      intelligenceEnv: { ...pool, ONTO_CONSOLE_ORIGIN: base },
    });
    await s.control.app.listen({ port: controlPort, host: '127.0.0.1' });
    await s.data.app.listen({ port: dataPort, host: '127.0.0.1' });
    await s.intelligence?.app.listen({ port: intelligencePort, host: '127.0.0.1' });
    await s.identityKnown();

    // A world with orders, a rule on big ones and a decision that waits for approval.
    await s.world('shop', { objectTypes: { Order: ORDER }, actionTypes: { shipOrder: SHIP } });
    for (const [path, body] of [
      [
        'rules/bigOrder',
        { objectType: 'Order', condition: 'self.amount >= 1000', alertType: 'big-order', severity: 'warning' },
      ],
      [
        'decision-definitions/shipBig',
        { rule: 'bigOrder', actionType: 'shipOrder', parameters: { order: 'self.id' }, approval: 'manual' },
      ],
    ] as const) {
      const res = await s.intelCall('PUT', `/v1/worlds/shop/${path}`, { body });
      expect(res.statusCode, res.body).toBeLessThan(300);
    }
    for (const [pk, amount] of [
      ['o-1', 100],
      ['o-2', 50],
    ] as const) {
      const res = await s.dataCall('PUT', `/v1/worlds/shop/objects/Order/${pk}`, {
        body: { properties: { amount, status: 'open' } },
      });
      expect(res.statusCode, res.body).toBe(201);
    }

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (err) => console.error('console page error:', err));
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await s?.close();
  });

  it('tells the console where data and intelligence are, and they allow its origin only', async () => {
    const config = await s.controlCall('GET', '/console/config.json');
    expect(config.json()).toEqual(urls);
    const preflight = await s.data.app.inject({
      method: 'OPTIONS',
      url: '/v1/worlds/shop/objects/Order/o-1',
      headers: { origin: base, 'access-control-request-method': 'PATCH' },
    });
    expect(preflight.statusCode).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe(base);
    const stranger = await s.data.app.inject({
      method: 'OPTIONS',
      url: '/v1/worlds/shop/objects/Order/o-1',
      headers: { origin: 'http://evil.example', 'access-control-request-method': 'PATCH' },
    });
    expect(stranger.headers['access-control-allow-origin']).toBeUndefined();
    expect((await s.controlCall('GET', '/console/nope.js')).statusCode).toBe(404);
  });

  it("shows a world's retention policy beside the history horizon data announced", async () => {
    // A world of its own, before the next step stops intelligence (a world needs it to be READY).
    await s.world('shelf', { objectTypes: { Order: ORDER } });
    const put = await s.dataCall('PUT', '/v1/worlds/shelf/objects/Order/o-1', {
      body: { properties: { id: 'o-1', amount: 5 } },
    });
    expect(put.statusCode, put.body).toBe(201);
    await page.goto(`${base}/console/`);
    await page.getByLabel(/API token/).fill(BOOTSTRAP);
    await page.getByTestId('sign-in').click();
    await page.getByTestId('world-shelf').waitFor();
    await page.goto(`${base}/console/#/w/shelf/tags`);
    await page.getByTestId('history-horizon').getByText('none (nothing pruned)').waitFor();
    expect(await page.getByTestId('retention-policy').textContent()).toBe('forever');
    // A policy: data's next pass moves the horizon (to the world's first commit: nothing is a day old)
    // and announces it; control learns it from Kafka and answers it with the world.
    const set = await s.controlCall('PUT', '/v1/worlds/shelf/retention', { body: { keepDays: 1, keepVersions: 3 } });
    expect(set.statusCode, set.body).toBe(200);
    const horizon = await s.until(
      'the horizon in control',
      async () => (await s.controlCall('GET', '/v1/worlds/shelf')).json().historyHorizon ?? undefined,
      60_000,
    );
    const { rows } = await s.data.app.pg.query<{ h: string }>(
      'SELECT horizon_seq::text AS h FROM world_retention WHERE world_id = $1',
      ['shelf'],
    );
    expect(horizon.commit).toBe(Number(rows[0]?.h));
    // Away and back (a reload would sign out: the token lives in memory only).
    await page.goto(`${base}/console/#/`);
    await page.getByTestId('world-shelf').waitFor();
    await page.goto(`${base}/console/#/w/shelf/tags`);
    await page
      .getByTestId('history-horizon')
      .getByText(`commit ${horizon.commit} (moved ${horizon.movedAt})`)
      .waitFor();
    expect(await page.getByTestId('retention-policy').textContent()).toBe(
      '1 day(s), and the newest 3 version(s) of each key',
    );
    await check('retention');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel(/API token/).waitFor();
  }, 120_000);

  it("shows a proposal's approvals and check results, and approves it as another owner (docs/adr/0085)", async () => {
    await s.world('vault', { objectTypes: { Order: ORDER } });
    const rule = await s.intelCall('PUT', '/v1/worlds/vault/rules/bigOrder', {
      body: { objectType: 'Order', condition: 'self.amount >= 1000', alertType: 'big-order', severity: 'warning' },
    });
    expect(rule.statusCode, rule.body).toBe(201);
    const seed = await s.dataCall('PUT', '/v1/worlds/vault/objects/Order/o-1', {
      body: { properties: { id: 'o-1', amount: 5 } },
    });
    expect(seed.statusCode, seed.body).toBe(201);
    await forkWorld(s, 'vault-dev', 'vault');
    await s.user('vito', 'vault', 'owner');
    const apiToken = (await s.controlCall('POST', '/v1/users/vito/tokens', { body: { name: 'console' } })).json().token;
    await s.until('the protection', async () => {
      const res = await s.controlCall('PUT', '/v1/worlds/vault/protection', {
        body: { requireMerge: false, requiredApprovals: 1, requiredChecks: ['bigOrder'] },
      });
      return res.statusCode === 200 ? true : undefined;
    });
    const big = await s.dataCall('PUT', '/v1/worlds/vault-dev/objects/Order/o-9', {
      body: { properties: { id: 'o-9', amount: 5000 } },
    });
    expect(big.statusCode, big.body).toBe(201);
    const started = await s.controlCall('POST', '/v1/worlds/vault/merges', {
      body: { source: 'vault-dev', strategy: 'SOURCE_WINS' },
    });
    expect(started.statusCode, started.body).toBe(202);
    const id = started.json().id as string;

    await page.goto(`${base}/console/`);
    await page.getByLabel(/API token/).fill(apiToken);
    await page.getByTestId('sign-in').click();
    await page.getByTestId('world-vault').waitFor();
    await page.goto(`${base}/console/#/w/vault/merges/${id}`);
    await page.locator('[data-testid="merge-view"][data-status="PROPOSED"]').waitFor({ timeout: 30_000 });
    await page.locator('[data-testid="checks"][data-state="failed"]').waitFor({ timeout: 30_000 });
    expect(await page.getByTestId('check-bigOrder').textContent()).toContain('Order o-9');
    await check('merge-proposal');
    // Approved, but the check failed: it waits.
    await page.getByTestId('approve-merge').click();
    await page.getByTestId('approvals').getByText('vito').waitFor();
    expect(await page.getByTestId('approve-merge').count()).toBe(0);

    // Fixed in the source: planned again, the approval void, the check passes; approved, it applies.
    const fixed = await s.dataCall('PATCH', '/v1/worlds/vault-dev/objects/Order/o-9', {
      body: { properties: { amount: 10 } },
    });
    expect(fixed.statusCode, fixed.body).toBe(200);
    await page.getByTestId('sent-back').waitFor({ timeout: 30_000 });
    await page.locator('[data-testid="checks"][data-state="passed"]').waitFor({ timeout: 30_000 });
    expect(await page.getByTestId('check-bigOrder').textContent()).toContain('nothing: passes');
    await page.getByTestId('approve-merge').click();
    await page.locator('[data-testid="merge-view"][data-status="MERGED"]').waitFor({ timeout: 30_000 });
    expect(await object('vault', 'o-9')).toMatchObject({ amount: 10 });
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel(/API token/).waitFor();
  }, 120_000);

  it('signs in, forks, edits the fork, shows the diff, merges MANUAL conflict by conflict, approves a decision, and shows the laggard', async () => {
    // Sign in with the bootstrap token.
    await page.goto(`${base}/console/`);
    await page.getByLabel(/API token/).fill('not-a-token-of-anyone-at-all-0123456789');
    await page.getByTestId('sign-in').click();
    await page.getByRole('alert').first().waitFor();
    await check('sign-in-refused');
    await page.getByLabel(/API token/).fill(BOOTSTRAP);
    await page.getByTestId('sign-in').click();
    await page.getByTestId('world-shop').waitFor();
    await check('worlds');

    // Fork shop now.
    await page.getByLabel('Id').fill('shop-fork');
    await page.getByLabel(/Fork from/).selectOption('shop');
    await page.getByTestId('create-world').click();
    await page.getByTestId('world-shop-fork').waitFor();
    await s.until('shop-fork READY', async () =>
      (await s.controlCall('GET', '/v1/worlds/shop-fork')).json().status === 'READY' ? true : undefined,
    );
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByTestId('world-shop-fork').getByText('READY').waitFor();
    await check('worlds-forked');

    // The objects of the fork, then o-1 edited there through its page.
    await page.goto(`${base}/console/#/w/shop-fork/objects`);
    await page.getByRole('link', { name: 'o-1' }).click();
    await page.getByTestId('prop-amount').fill('150');
    await page.getByTestId('prop-status').fill('"packed"');
    await page.getByTestId('save-object').click();
    await page.getByText('Version 2').waitFor();
    // Its history: the fork's edit, property by property, then the version inherited from shop.
    const history = page.getByTestId('object-history');
    await history.getByText('(in shop)').waitFor();
    await history.locator('tr', { hasText: 'v2' }).getByText('amount').waitFor();
    await check('object');
    // v1 was written in shop before the fork: it is read there, at its commit, read only.
    await history.getByRole('link', { name: 'Read v1 in shop' }).click();
    await page.getByText('Version 1').waitFor();
    // intelligence's derived values are read at the same commit (Order has none: its answer is there, empty)
    await page.getByText('No derived properties on Order.').waitFor();
    expect(await page.getByTestId('prop-amount').count()).toBe(0);
    expect(page.url()).toContain('#/w/shop/object/Order/o-1/');
    await page.goBack();
    await page.getByText('Version 2').waitFor();
    await page.getByTestId('save-object').waitFor();
    expect(await object('shop-fork', 'o-1')).toMatchObject({ amount: 150, status: 'packed' });
    expect(await object('shop', 'o-1')).toMatchObject({ amount: 100, status: 'open' });

    // The target changes both properties too; o-2 grows past the rule's bound (a decision).
    const changed = await s.dataCall('PATCH', '/v1/worlds/shop/objects/Order/o-1', {
      body: { properties: { amount: 120, status: 'held' } },
    });
    expect(changed.statusCode, changed.body).toBe(200);
    expect(
      (await s.dataCall('PATCH', '/v1/worlds/shop/objects/Order/o-2', { body: { properties: { amount: 2000 } } }))
        .statusCode,
    ).toBe(200);

    // The diff of the fork against shop.
    await page.goto(`${base}/console/#/w/shop-fork/diff`);
    await page.getByTestId('diff-against').selectOption('shop');
    await page.getByTestId('diff').getByText('Order o-1').waitFor();
    await check('diff');

    // A MANUAL merge of the fork into shop: a dry run, then for real, one conflict per property.
    await page.goto(`${base}/console/#/w/shop/merges`);
    await page.getByLabel('Source world').selectOption('shop-fork');
    await page.getByLabel('Strategy').selectOption('MANUAL');
    await page.getByTestId('start-merge').click();
    await page.locator('[data-testid="merge-view"][data-status="CONFLICTS"]').waitFor();
    await expect(page.getByTestId('apply-merge').count()).resolves.toBe(0); // a dry run applies nothing
    await page.getByLabel('Dry run').uncheck();
    await page.getByTestId('start-merge').click();
    await page.locator('[data-testid="merge-view"][data-status="CONFLICTS"]').getByTestId('apply-merge').waitFor();
    const amount = page.locator('[data-testid^="conflict-"]', { hasText: 'amount' });
    const status = page.locator('[data-testid^="conflict-"]', { hasText: 'status' });
    expect(await amount.count()).toBe(1);
    expect(await status.count()).toBe(1);
    await amount.getByRole('button', { name: 'Take source' }).click();
    await amount.getByText('Resolved: source').waitFor();
    await page.screenshot({ path: `${OUT}/merge.png` }); // docs/console-merge.png, in the README
    // A value the schema refuses is shown as the API's problem, in place.
    await status.getByLabel('Value (JSON)').fill('42');
    await status.getByRole('button', { name: 'Use value' }).click();
    await status.getByRole('alert').waitFor();
    await check('merge-conflicts');
    await status.getByLabel('Value (JSON)').fill('"approved"');
    await status.getByRole('button', { name: 'Use value' }).click();
    await status.getByText('Resolved: value').waitFor();
    await page.getByTestId('apply-merge').click();
    await page.locator('[data-testid="merge-view"][data-status="MERGED"]').waitFor({ timeout: 30_000 });
    await check('merge-merged');
    expect(await object('shop', 'o-1')).toMatchObject({ amount: 150, status: 'approved' });

    // The decision o-2's alert made, approved on the intelligence page.
    const decision = await s.until('a decision waiting for approval', async () => {
      const list = (await s.intelCall('GET', '/v1/worlds/shop/decisions')).json().decisions as Array<{
        id: string;
        status: string;
      }>;
      return list.find((d) => d.status === 'PENDING_APPROVAL');
    });
    await page.goto(`${base}/console/#/w/shop/intelligence`);
    await page.getByTestId(`approve-${decision.id}`).click();
    await page.getByTestId(`decision-${decision.id}`).getByText('PENDING_APPROVAL').waitFor({ state: 'detached' });
    await check('intelligence');
    expect((await s.intelCall('GET', `/v1/worlds/shop/decisions/${decision.id}`)).json().status).not.toBe(
      'PENDING_APPROVAL',
    );
    // The action the approval ran, opened with its saga steps.
    const action = await s.until('the approved action to complete', async () => {
      const list = (await s.intelCall('GET', '/v1/worlds/shop/actions')).json().actions as Array<{
        id: string;
        status: string;
      }>;
      return list.find((a) => a.status === 'COMPLETED');
    });
    // (the access token lives in memory only: away and back by the hash, not a reload)
    await page.goto(`${base}/console/#/w/shop/tags`);
    await page.goto(`${base}/console/#/w/shop/intelligence`);
    await page.getByRole('button', { name: action.id.slice(-8) }).click();
    const steps = page.getByTestId('action-steps');
    await steps.getByText('modifyObject').first().waitFor();
    await steps.getByText('COMPLETED').first().waitFor();
    await steps.getByText('applied at v3 (was v2)').waitFor(); // o-2: created, grown to 2000, then the action
    await check('action-steps');

    // A rule the service refuses: its problem, field by field, in place; nothing is stored.
    await page.getByTestId('definition-kind').selectOption('rules');
    await page.getByTestId('definition-name').fill('broken');
    await page
      .getByTestId('definition-body')
      .fill(JSON.stringify({ objectType: 'Order', condition: 'self.amount >', alertType: 'x', severity: 'warning' }));
    await page.getByTestId('definition-save').click();
    await page.locator('form [role="alert"]').getByText('condition').first().waitFor();
    await check('intelligence-refused');
    expect((await s.intelCall('GET', '/v1/worlds/shop/rules/broken')).statusCode).toBe(404);

    // A tag of shop, COMPLETE once data and intelligence gave their positions.
    await page.goto(`${base}/console/#/w/shop/tags`);
    await page.getByLabel('New tag').fill('v1');
    await page.getByRole('button', { name: 'Tag', exact: true }).click();
    await page.getByRole('cell', { name: 'v1', exact: true }).waitFor();
    await check('tags');
    expect((await s.controlCall('GET', '/v1/worlds/shop/tags/v1')).statusCode).toBe(200);

    // A viewer sees no write buttons (and the API would refuse anyway).
    expect((await s.controlCall('POST', '/v1/users', { body: { id: 'vera' } })).statusCode).toBe(201);
    expect((await s.controlCall('PUT', '/v1/worlds/shop/members/vera', { body: { role: 'viewer' } })).statusCode).toBe(
      200,
    );
    const viewerToken = (await s.controlCall('POST', '/v1/users/vera/tokens', { body: {} })).json().token as string;
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel(/API token/).fill(viewerToken);
    await page.getByTestId('sign-in').click();
    await page.getByTestId('world-shop').waitFor();
    expect(await page.getByTestId('world-shop-fork').count()).toBe(0); // not a member there
    await page.goto(`${base}/console/#/w/shop/object/Order/o-1`);
    await page.getByText('Version', { exact: false }).first().waitFor();
    expect(await page.getByTestId('save-object').count()).toBe(0);
    await page.goto(`${base}/console/#/w/shop/merges`);
    await page.getByRole('heading', { name: 'Merge history' }).waitFor();
    expect(await page.getByTestId('start-merge').count()).toBe(0);
    await check('viewer-merges');

    // The schema, then the consistency board: with intelligence stopped, a write in data leaves it behind.
    await page.goto(`${base}/console/#/w/shop/schema`);
    await page.getByText('Order', { exact: true }).first().waitFor();
    await page.getByRole('heading', { name: 'History' }).waitFor();
    expect(await page.getByRole('group').filter({ hasText: 'diff' }).count()).toBeGreaterThanOrEqual(2); // one per version
    await check('schema');
    await page.goto(`${base}/console/#/w/shop/consistency`);
    await page.getByTestId('vector-data').waitFor();
    // The pipelines' gauges come from each service's /metrics, across origins.
    for (const service of ['control', 'data', 'intelligence']) {
      await page.locator(`[data-testid="gauge-${service}-onto_outbox_backlog"]`, { hasText: /^\d+$/ }).waitFor();
    }
    // The vector's last hour comes from control's record, not from the page: on a fresh load the chart
    // already holds the window's start, the positions recorded since, and the vector now.
    const behind = page.locator('figure.spark', { hasText: 'intelligence behind data' });
    await s.until('the recorded hour charted', async () =>
      Number(await behind.getAttribute('data-points')) >= 3 ? true : undefined,
    );
    await check('consistency');
    await s.intelligence?.app.close();
    expect(
      (await s.dataCall('PATCH', '/v1/worlds/shop/objects/Order/o-2', { body: { properties: { amount: 7 } } }))
        .statusCode,
    ).toBe(200);
    await page.locator('[data-testid="vector-intelligence"].laggard').waitFor({ timeout: 20_000 });
    await page.getByText('lagging: intelligence').waitFor();
    await page.locator('[data-testid="gauge-intelligence-onto_consumer_lag"]', { hasText: 'not answering' }).waitFor();
    await check('consistency-lagging');

    // At phone width the merge history still reads.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${base}/console/#/w/shop/merges`);
    await page.getByRole('heading', { name: 'Merge history' }).waitFor();
    await check('phone-merges');
  }, 180_000);

  it("shows a world's webhooks with their delivery log, and its live events over SSE", async () => {
    // A receiver of the test's own: every delivery's signature verified with the standardwebhooks package.
    let secret = '';
    const received: Array<{ id: string; type: string; verified: boolean }> = [];
    const receiver = createHttpServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => {
        body += chunk;
      });
      req.on('end', () => {
        let verified = false;
        try {
          new Webhook(secret).verify(body, req.headers as Record<string, string>);
          verified = true;
        } catch {}
        received.push({ id: String(req.headers['webhook-id']), type: JSON.parse(body).type, verified });
        res.writeHead(verified ? 200 : 401).end(verified ? 'thanks' : 'bad signature');
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const receiverUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hooks`;
    try {
      // The previous step left a viewer signed in, at phone width.
      await page.setViewportSize({ width: 1280, height: 900 });
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByLabel(/API token/).fill(BOOTSTRAP);
      await page.getByTestId('sign-in').click();
      await page.getByTestId('world-shop').waitFor();

      // A webhook made on the page: its secret shown once.
      await page.goto(`${base}/console/#/w/shop/webhooks`);
      await page.getByText('No webhooks in shop.').waitFor();
      await page.getByLabel('Webhook name').fill('orders');
      await page.getByLabel('Receiver URL').fill(receiverUrl);
      await page.getByLabel(/Event types/).fill('object.updated');
      await page.getByTestId('save-webhook').click();
      secret = (await page.getByTestId('webhook-secret').textContent()) ?? '';
      expect(secret).toMatch(/^whsec_/);
      await page.getByTestId('webhook-orders').getByText('active').waitFor();
      await check('webhooks');
      const stored = (await s.dataCall('GET', '/v1/worlds/shop/webhooks/orders')).json();
      expect(stored).toMatchObject({ url: receiverUrl, events: ['object.updated'], active: true });
      expect(stored.secret).toBeUndefined();
      // A URL data refuses: the problem, naming the field, in place; nothing stored.
      await page.getByLabel('Webhook name').fill('metadata');
      await page.getByLabel('Receiver URL').fill('http://169.254.169.254/latest');
      await page.getByTestId('save-webhook').click();
      await page.locator('form [role="alert"]').getByText('/url').waitFor();
      expect((await s.dataCall('GET', '/v1/worlds/shop/webhooks/metadata')).statusCode).toBe(404);

      // The live view: subscribed over SSE, then a change made through the API shows up.
      await page.goto(`${base}/console/#/w/shop/live`);
      await page.getByTestId('live-start').click();
      await page.getByTestId('live-state').getByText('connected', { exact: true }).waitFor();
      const changed = await s.dataCall('PATCH', '/v1/worlds/shop/objects/Order/o-1', {
        body: { properties: { amount: 321 } },
      });
      expect(changed.statusCode, changed.body).toBe(200);
      const row = page.locator('[data-testid="live-events"] tr[data-event="object.updated"]', { hasText: '321' });
      await row.waitFor();
      expect(await row.textContent()).toContain('shop/Order/o-1');
      await check('live');
      await page.getByTestId('live-stop').click();
      await page.getByTestId('live-state').getByText('stopped').waitFor();

      // The receiver got it, signed; the delivery log on the page says so.
      const delivery = await s.until('the delivery', async () =>
        received.find((r) => r.type === 'object.updated' && r.verified),
      );
      await page.goto(`${base}/console/#/w/shop/webhooks/orders`);
      const logged = page.locator('[data-testid="deliveries"] tr[data-state="delivered"]', { hasText: delivery.id });
      await s.until('the delivery in the log', async () => {
        await page.getByTestId('refresh-deliveries').click();
        return (await logged.count()) > 0 ? true : undefined;
      });
      const text = (await logged.first().textContent()) ?? '';
      expect(text).toContain('object.updated');
      expect(text).toContain('200');
      expect(text).toContain('thanks');
      await check('webhook-deliveries');
      const log = (await s.dataCall('GET', '/v1/worlds/shop/webhooks/orders/deliveries')).json().deliveries;
      expect(log).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ eventId: delivery.id, state: 'delivered', status: 200, response: 'thanks' }),
        ]),
      );

      // The secret rotated from the page: a new one shown once, the old one still signing for the overlap.
      await page.goto(`${base}/console/#/w/shop/webhooks`);
      await page.getByTestId('rotate-orders').click();
      await page.locator('[data-testid="webhook-secret"]', { hasNotText: secret }).waitFor();
      const rotatedSecret = (await page.getByTestId('webhook-secret').textContent()) ?? '';
      expect(rotatedSecret).toMatch(/^whsec_/);
      expect((await s.dataCall('GET', '/v1/worlds/shop/webhooks/orders')).json().secondSecretUntil).not.toBeNull();

      // Deleted from the page.
      await page.getByTestId('delete-orders').click();
      await page.getByText('No webhooks in shop.').waitFor();
      expect((await s.dataCall('GET', '/v1/worlds/shop/webhooks/orders')).statusCode).toBe(404);
    } finally {
      await new Promise((resolve) => receiver.close(resolve));
    }
  }, 120_000);
});
