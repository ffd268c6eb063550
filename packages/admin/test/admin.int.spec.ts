import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { uuidv7 } from '@onto/shared';
import { testEndpoints } from '@onto/shared/testing';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from '../../../services/intelligence/test/stack.js';
import { EXIT } from '../src/main.js';
import { runCli } from './cli.js';

/** onto-admin against the three services listening on free ports, and Kafka. */

const W = 'ops';
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer', required: true } },
};

describe('onto-admin against the running stack', () => {
  let s: IntelligenceStack;
  let globals: string[];
  const kafka = new Kafka({ brokers: testEndpoints().kafkaBrokers.split(','), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();

  const run = (...args: string[]) => runCli(globals, ...args);
  const intelligenceRow = async (pk: string) =>
    (
      await s.intelligence?.app.pg.query<{ version: string; properties: unknown }>(
        `SELECT version::text, properties FROM rm_objects WHERE world_id = $1 AND type = 'Order' AND pk = $2`,
        [W, pk],
      )
    )?.rows[0];
  const log = async (topic: string) => admin.fetchTopicOffsets(`${s.prefix}${topic}`);
  const metric = async (name: string, labels: string) => {
    const res = await s.intelligence?.app.inject({ method: 'GET', url: '/metrics' });
    const line = res?.body.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
    return line ? Number(line.split(' ').at(-1)) : 0;
  };
  const put = async (pk: string, amount: number) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/${pk}`, { body: { properties: { amount } } });
    expect(res.statusCode, res.body).toBeLessThan(300);
  };

  beforeAll(async () => {
    // Small pools: the test's three services share one PostgreSQL with the other test files.
    const pool = { DB_POOL_MAX: '5' };
    s = await intelligenceStack({ partitions: 1, controlEnv: pool, dataEnv: pool, intelligenceEnv: pool });
    const urls: string[] = [];
    for (const app of [s.control.app, s.data.app, s.intelligence?.app]) {
      urls.push(await (app as NonNullable<typeof app>).listen({ port: 0, host: '127.0.0.1' }));
    }
    globals = [
      '--json',
      '--control-url',
      urls[0] as string,
      '--data-url',
      urls[1] as string,
      '--intelligence-url',
      urls[2] as string,
      '--token',
      s.admin,
      '--kafka-brokers',
      testEndpoints().kafkaBrokers,
      '--topic-prefix',
      s.prefix,
      '--timeout',
      '30',
    ];
    await admin.connect();
    await s.world(W, {
      objectTypes: { Order },
      linkTypes: { follows: { from: 'Order', to: 'Order', cardinality: 'MANY_TO_MANY' } },
    });
    const rule = await s.intelCall('PUT', `/v1/worlds/${W}/rules/big`, {
      body: { objectType: 'Order', condition: 'self.amount > 100', alertType: 'order.big', severity: 'warning' },
    });
    expect(rule.statusCode, rule.body).toBe(201);
    const derived = await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/double`, {
      body: { objectType: 'Order', expression: 'self.amount * 2' },
    });
    expect(derived.statusCode, derived.body).toBe(201);
    for (const [pk, amount] of [
      ['o-1', 5],
      ['o-2', 500],
      ['o-3', 7],
    ] as const)
      await put(pk, amount);
    for (const to of ['o-2', 'o-3']) {
      const link = await s.dataCall('PUT', `/v1/worlds/${W}/links/follows/o-1/${to}`);
      expect(link.statusCode, link.body).toBe(201);
    }
    await s.until('the three orders in intelligence', async () =>
      (await run('object-recount', '--world', W, '--type', 'Order', '--no-wait')).json().intelligenceBefore === 3
        ? true
        : undefined,
    );
  }, 120_000);
  afterAll(async () => {
    await admin.disconnect();
    await s?.close();
  });

  it('has --help on each command, naming the exit codes', async () => {
    for (const command of [
      [],
      ['dlq', 'list'],
      ['dlq', 'show'],
      ['dlq', 'redrive'],
      ['event-replay'],
      ['schema-reconcile'],
      ['object-recount'],
      ['link-recount'],
      ['derived-recalc'],
      ['merge-verify'],
    ]) {
      const help = await run(...command, '--help');
      expect(help.code, command.join(' ')).toBe(EXIT.ok);
      expect(help.out).toContain('Exit codes:');
    }
    expect((await run('event-replay', '--help')).out).toContain('INBOX_RETENTION_HOURS');
  });

  it('runs as `pnpm onto-admin` and `./onto admin`, its exit code the process status', () => {
    const repo = fileURLToPath(new URL('../../..', import.meta.url));
    const viaPnpm = spawnSync('pnpm', ['--loglevel', 'silent', 'onto-admin', 'merge-verify', '--merge-id', 'm-1'], {
      cwd: repo,
      encoding: 'utf8',
    });
    expect(viaPnpm.status, viaPnpm.stderr).toBe(EXIT.usage);
    expect(viaPnpm.stderr).toContain('--world');
    const viaOnto = spawnSync(`${repo}/onto`, ['admin', 'schema-reconcile', '--help'], { encoding: 'utf8' });
    expect(viaOnto.status, viaOnto.stderr).toBe(EXIT.ok);
    expect(viaOnto.stdout).toContain('Usage: onto-admin schema-reconcile');
  });

  it('refuses bad input with a message and a non-zero exit, changing nothing', async () => {
    const before = await log('onto.changes.objects');
    const cases: [string[], number, RegExp][] = [
      [['schema-reconcile', '--world', 'nowhere'], EXIT.notFound, /world nowhere does not exist/],
      [['schema-reconcile', '--world', 'Bad World'], EXIT.usage, /--world must match/],
      [['object-recount', '--world', W, '--type', 'Nothing'], EXIT.notFound, /Nothing is not in the schema/],
      [['object-recount', '--world', 'nowhere', '--type', 'Order'], EXIT.notFound, /nowhere/],
      [['link-recount', '--world', W, '--type', 'nothing'], EXIT.notFound, /link type nothing is not in the schema/],
      [['derived-recalc', '--world', W, '--property', 'nothing'], EXIT.notFound, /nothing is not defined/],
      [['dlq', 'list', '--topic', 'no.such.topic'], EXIT.notFound, /no\.such\.topic does not exist/],
      [
        ['event-replay', '--topic', 'no.such', '--from-offset', '0', '--to-offset', '0'],
        EXIT.notFound,
        /does not exist/,
      ],
      [
        ['event-replay', '--topic', 'onto.changes.objects', '--from-offset', '2', '--to-offset', '1'],
        EXIT.usage,
        /after --to-offset/,
      ],
      [
        ['event-replay', '--topic', 'onto.changes.objects', '--from-offset', '0', '--to-offset', '100000'],
        EXIT.range,
        /past the log end/,
      ],
      [
        ['event-replay', '--topic', 'onto.changes.objects', '--from-offset', 'x', '--to-offset', '1'],
        EXIT.usage,
        /offset/,
      ],
      [['merge-verify', '--world', W, '--merge-id', 'm-1'], EXIT.usage, /--merge-id must match/],
      [
        ['merge-verify', '--world', W, '--merge-id', '0190a0a0-0000-7000-8000-000000000000'],
        EXIT.notFound,
        /has no merge/,
      ],
    ];
    for (const [args, code, message] of cases) {
      const res = await run(...args);
      expect(res.code, `${args.join(' ')}: ${res.err}`).toBe(code);
      expect(res.err).toMatch(message);
    }
    expect(await log('onto.changes.objects')).toEqual(before);
  });

  it('schema-reconcile re-publishes the current schema; the services keep their version', async () => {
    const version = (await s.dataCall('GET', `/v1/worlds/${W}/schema-version`)).json().version;
    const res = await run('schema-reconcile', '--world', W);
    expect(res.code, res.err).toBe(EXIT.ok);
    expect(res.json()).toMatchObject({ world: W, version });
    const records = await s.records('onto.schema', (seen) => seen.some((r) => r.event.event_id === res.json().eventId));
    expect(records.filter((r) => r.event.version === version && r.event.world_id === W)).toHaveLength(2);
    expect((await s.dataCall('GET', `/v1/worlds/${W}/schema-version`)).json().version).toBe(version);
  });

  it('object-recount re-announces the objects and intelligence takes back the one it lost', async () => {
    const kept = await intelligenceRow('o-1');
    await s.intelligence?.app.pg.query(`DELETE FROM rm_objects WHERE world_id = $1 AND pk = 'o-3'`, [W]);
    const res = await run('object-recount', '--world', W, '--type', 'Order');
    expect(res.code, res.err).toBe(EXIT.ok);
    expect(res.json()).toMatchObject({
      data: 3,
      announced: 3,
      intelligenceBefore: 2,
      intelligenceAfter: 3,
      consistent: true,
    });
    expect(await intelligenceRow('o-3')).toEqual({ version: '1', properties: { id: 'o-3', amount: 7 } });
    expect(await intelligenceRow('o-1')).toEqual(kept);
  });

  it('link-recount re-announces the links and intelligence takes back the one it lost', async () => {
    const links = async () =>
      (
        await s.intelligence?.app.pg.query<{ to_pk: string; version: string }>(
          `SELECT to_pk, version::text FROM rm_links WHERE world_id = $1 AND link_type = 'follows' AND NOT deleted
            ORDER BY to_pk`,
          [W],
        )
      )?.rows;
    await s.until('both links in intelligence', async () => ((await links())?.length === 2 ? true : undefined));
    await s.intelligence?.app.pg.query(`DELETE FROM rm_links WHERE world_id = $1 AND to_pk = 'o-3'`, [W]);
    const res = await run('link-recount', '--world', W, '--type', 'follows');
    expect(res.code, res.err).toBe(EXIT.ok);
    expect(res.json()).toMatchObject({
      data: 2,
      announced: 2,
      intelligenceBefore: 1,
      intelligenceAfter: 2,
      consistent: true,
    });
    expect(await links()).toEqual([
      { to_pk: 'o-2', version: '1' },
      { to_pk: 'o-3', version: '1' },
    ]);
  });

  it("merge-verify prints control's check and waits for data's and intelligence's (--timeout)", async () => {
    // A MERGED merge of ops into itself, written straight into control's table: the stack's data
    // and intelligence of this branch do not run merges, so they never report and the run times out.
    const pg = s.control.app.pg;
    const id = uuidv7();
    await pg.query(
      `INSERT INTO merges (id, plan_id, target, source, strategy, status, phase, source_schema_version, target_schema_version,
                           merged_schema, actor, result)
       SELECT $1, $1, $2, $2, 'SOURCE_WINS', 'MERGED', 'done', version, version, document, 'admin',
              json_build_object('schemaVersion', version, 'dataSeq', 1, 'definitions', 1)
         FROM schema_versions WHERE world_id = $2 ORDER BY version DESC LIMIT 1`,
      [id, W],
    );
    const quick = [...globals.slice(0, -2), '--timeout', '1'];
    const res = await runCli(quick, 'merge-verify', '--world', W, '--merge-id', id);
    expect(res.code, res.err).toBe(EXIT.timeout);
    expect(res.json()).toMatchObject({
      merge: id,
      complete: false,
      services: { control: { differences: 0 }, data: null },
    });
    expect(res.json().services.control.checked).toBeGreaterThan(0);
    expect(res.err).toMatch(/not every service reported/);
  });

  it('derived-recalc recomputes a value made wrong', async () => {
    const value = async () =>
      (
        await s.intelligence?.app.pg.query<{ value: unknown }>(
          `SELECT value FROM derived_values WHERE world_id = $1 AND name = 'double' AND pk = 'o-2'`,
          [W],
        )
      )?.rows[0]?.value;
    await s.until('double of o-2 computed', async () => ((await value()) === 1000 ? true : undefined));
    await s.intelligence?.app.pg.query(
      `UPDATE derived_values SET value = '1' WHERE world_id = $1 AND name = 'double' AND pk = 'o-2'`,
      [W],
    );
    const res = await run('derived-recalc', '--world', W, '--property', 'double');
    expect(res.code, res.err).toBe(EXIT.ok);
    expect(res.json()).toMatchObject({ property: 'double', objectType: 'Order', objects: 3 });
    expect(res.json().finishedAt).toEqual(expect.any(String));
    expect(await value()).toBe(1000);
  });

  it('event-replay of a range already applied has no effect twice', async () => {
    const alerts = async () => (await s.intelCall('GET', `/v1/worlds/${W}/alerts`)).json();
    const alertsBefore = await alerts();
    expect(JSON.stringify(alertsBefore)).toContain('o-2');
    const rowsBefore = await Promise.all(['o-1', 'o-2'].map(intelligenceRow));
    const [partition] = await log('onto.changes.objects');
    const high = Number(partition?.high);
    const duplicates = () => metric('onto_inbox_duplicates_total', `${s.prefix}intelligence-changes`);
    const duplicatesBefore = await duplicates();
    const res = await run(
      'event-replay',
      '--topic',
      'onto.changes.objects',
      '--partition',
      '0',
      '--from-offset',
      '0',
      '--to-offset',
      String(high - 1),
    );
    expect(res.code, res.err).toBe(EXIT.ok);
    expect(res.json()).toMatchObject({ replayed: high });
    expect(Number((await log('onto.changes.objects'))[0]?.high)).toBe(2 * high);
    await s.until('every replayed event skipped as a duplicate', async () =>
      (await duplicates()) - duplicatesBefore >= high ? true : undefined,
    );
    expect(await alerts()).toEqual(alertsBefore);
    expect(await Promise.all(['o-1', 'o-2'].map(intelligenceRow))).toEqual(rowsBefore);
  });

  it('dlq redrive applies a poisoned event once its cause is fixed, and empties the DLQ', async () => {
    const pg = s.intelligence?.app.pg;
    await pg?.query(`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.pk = 'poison' THEN RAISE EXCEPTION 'the poison pill'; END IF; RETURN NEW; END $$`);
    await pg?.query(
      'CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON rm_objects FOR EACH ROW EXECUTE FUNCTION refuse_poison()',
    );
    await put('poison', 1);
    const listed = await s.until(
      'the poisoned event dead-lettered',
      async () => {
        const res = await run('dlq', 'list', '--topic', 'onto.changes.objects');
        expect(res.code, res.err).toBe(EXIT.ok);
        return res.json().length > 0 ? res.json() : undefined;
      },
      60_000,
    );
    expect(listed).toHaveLength(1);
    globals = globals.filter((g) => g !== '--json');
    const table = await run('dlq', 'list', '--topic', 'onto.changes.objects'); // for people
    globals = ['--json', ...globals];
    expect(table.out).toMatch(/partition.*offset.*key.*error type.*error.*original.*consumer/);
    expect(table.out).toContain('the poison pill');
    expect(table.err).toContain('1 dead letter(s)');
    expect(listed[0]).toMatchObject({
      key: `${W}/Order/poison`,
      error: expect.stringContaining('the poison pill'),
      original: { topic: `${s.prefix}onto.changes.objects`, partition: '0' },
      consumer: `${s.prefix}intelligence-changes`,
    });
    const shown = await run('dlq', 'show', '--topic', 'onto.changes.objects', '--offset', listed[0].offset);
    expect(shown.code, shown.err).toBe(EXIT.ok);
    expect(shown.json().value).toMatchObject({ type: 'object.created', payload: { pk: 'poison' } });
    expect((await run('dlq', 'show', '--topic', 'onto.changes.objects', '--offset', '99')).code).toBe(EXIT.notFound);
    expect(await intelligenceRow('poison')).toBeUndefined();

    await pg?.query('DROP TRIGGER refuse_poison ON rm_objects'); // the cause, fixed
    const redriven = await run('dlq', 'redrive', '--topic', 'onto.changes.objects');
    expect(redriven.code, redriven.err).toBe(EXIT.ok);
    expect(redriven.json()).toMatchObject({ redriven: 1 });
    await s.until('the redriven event applied', async () => ((await intelligenceRow('poison')) ? true : undefined));
    const [dlq] = await log('onto.changes.objects.dlq');
    expect(dlq?.low).toBe(dlq?.high); // onto_dlq_depth is high - low
    expect((await run('dlq', 'list', '--topic', 'onto.changes.objects')).json()).toEqual([]);

    const again = await run('dlq', 'redrive', '--topic', 'onto.changes.objects');
    expect(again.code).toBe(EXIT.nothingToDo);
    expect(again.err).toMatch(/is empty: nothing to redrive/);
  }, 90_000);
});
