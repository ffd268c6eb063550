import { fileURLToPath } from 'node:url';
import { builtForProcesses, committedToEnd, eventually, testBroker, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { startService } from '../bench/lib/services.js';
import { benchStack, Item } from '../bench/lib/stack.js';

// data runs as a real process from its compiled server (./onto test builds it first), so that it
// can be killed with SIGKILL while a bulk write is at a chosen statement.
const built = builtForProcesses([fileURLToPath(new URL('../services/data/dist/server.js', import.meta.url))]);
const W = 'bulkcrash';
const N = 20_000;

describe.runIf(built)('data killed in the middle of a bulk write', () => {
  it('leaves nothing of the write at any step; the retry writes it whole and every event reaches Kafka', async () => {
    const stack = await benchStack();
    const endpoints = testEndpoints();
    const env = {
      REDIS_URL: endpoints.redisUrl,
      KAFKA_BROKERS: endpoints.kafkaBrokers,
      ONTO_TOPIC_PREFIX: stack.topics.prefix,
      DATABASE_URL: stack.dataDb.url,
    };
    let data: { url: string; kill: () => Promise<void>; stop: () => Promise<void> } = stack.data;
    const db = new pg.Client(stack.dataDb.url);
    await db.connect();
    const post = (url: string, body: string) =>
      fetch(`${url}/v1/worlds/${W}/bulk/Item`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-ndjson', authorization: `Bearer ${stack.token}` },
        body,
      });
    // 503 + Retry-After while data's identity replica is behind control (ADR 6): until it answers.
    const replicaCaughtUp = (url: string) =>
      eventually(
        "data's identity replica caught up with control",
        async () =>
          (
            await fetch(`${url}/v1/worlds/${W}/schema-version`, {
              headers: { authorization: `Bearer ${stack.token}` },
            })
          ).status !== 503,
        { timeoutMs: 40_000, intervalMs: 250 },
      );
    const stored = async (round: string) => {
      const { rows } = await db.query<{ heads: number; history: number; events: number }>(
        `SELECT (SELECT count(*)::int FROM object_heads WHERE world_id = $1 AND pk LIKE $2) AS heads,
                (SELECT count(*)::int FROM object_versions WHERE world_id = $1 AND pk LIKE $2) AS history,
                (SELECT count(*)::int FROM outbox_events WHERE partition_key LIKE $1 || '/Item/' || $2) AS events`,
        [W, `${round}-%`],
      );
      return rows[0];
    };
    try {
      await stack.world(W, { objectTypes: { Item } });
      // Each step is held at a row of its table: another transaction writes, uncommitted, the row
      // the step will write first (the first pk's head, the next outbox id), so the step waits on
      // that row's unique index entry until data is dead. Nothing else writes this database. (New
      // objects have no history rows: docs/adr/0017.)
      const blockers: Record<string, (round: string, client: pg.Client) => Promise<void>> = {
        'COPY object_heads': async (round, client) => {
          await client.query(
            `INSERT INTO object_heads (world_id, type, pk, version, seq, properties, schema_version, actor)
             VALUES ($1, 'Item', $2, 1, 0, '{}', 1, 'test')`,
            [W, `${round}-0`],
          );
        },
        'COPY outbox': async (_round, client) => {
          // The next twenty ids, not just the next: should a service's own event take one first
          // (a consumer's reply, say), the COPY still meets a held one.
          await client.query(
            `INSERT INTO outbox (id, event_id, topic, partition_key, lane, body)
             OVERRIDING SYSTEM VALUE
             SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END + k, gen_random_uuid(), 'x', 'x', 0, 'x'
               FROM outbox_id_seq, generate_series(0, 19) AS k`,
          );
        },
      };
      const steps = Object.keys(blockers);
      for (const [r, step] of steps.entries()) {
        const round = `r${r}`;
        const body = Array.from({ length: N }, (_, i) =>
          JSON.stringify({ properties: { id: `${round}-${i}`, name: `item ${i}`, amount: i, status: 'open' } }),
        ).join('\n');
        const blocker = new pg.Client(stack.dataDb.url);
        blocker.on('error', () => {}); // after a failure, the database is dropped under it
        await blocker.connect();
        await blocker.query('BEGIN');
        await blockers[step]?.(round, blocker);
        // The request runs until data's backend waits at the step; then data dies.
        type Outcome = { status: number | 'killed'; text: string };
        const send = () =>
          post(data.url, body).then(
            async (res): Promise<Outcome> => ({ status: res.status, text: await res.text() }),
            (): Outcome => ({ status: 'killed', text: '' }),
          );
        let request = send();
        let ended: Outcome | undefined;
        const watch = (sent: Promise<Outcome>) =>
          void sent.then((outcome) => {
            if (request === sent) ended = outcome;
          });
        watch(request);
        const seen = await eventually(
          `data waiting at ${step}`,
          async () => {
            if (ended) {
              // A 503 while data's identity replica is behind control, as it can be on a busy
              // machine: the same request again once it caught up. Anything else ended the write early.
              if (ended.status !== 503)
                throw new Error(`the write ended before ${step}: ${ended.status} ${ended.text}`);
              ended = undefined;
              await replicaCaughtUp(data.url);
              request = send();
              watch(request);
            }
            const { rows } = await db.query<{ pid: number }>(
              `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
                  AND query LIKE $1 || '%'`,
              [step],
            );
            return rows[0]?.pid;
          },
          { timeoutMs: 60_000, intervalMs: 50 },
        );
        expect(seen, `data waits at ${step}`).toBeDefined();
        await data.kill();
        expect((await request).status).toBe('killed');
        await blocker.query('ROLLBACK');
        await blocker.end();
        // Its backend notices the lost connection and rolls back; the assertion below is what counts.
        await eventually(
          "the killed process's backend gone",
          async () => (await db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [seen])).rowCount === 0,
          { timeoutMs: 10_000, intervalMs: 50 },
        ).catch(() => {});
        expect(await stored(round), step).toEqual({ heads: 0, history: 0, events: 0 });

        // A new process: the same request again writes everything once.
        data = await startService('data', env);
        await replicaCaughtUp(data.url);
        const res = await post(data.url, body);
        expect(res.status, await res.clone().text()).toBe(200);
        expect(await res.json()).toMatchObject({ created: N, updated: 0, unchanged: 0 });
        expect(await stored(round)).toEqual({ heads: N, history: N, events: N });
      }

      // The relay publishes every bundle: every event reaches the topic, under its own event id.
      await eventually(
        'the outbox published',
        async () => (await db.query('SELECT 1 FROM outbox_pending LIMIT 1')).rowCount === 0,
        { timeoutMs: 60_000, intervalMs: 100 },
      );
      const ids = new Set<string>();
      const keys = new Set<string>();
      const broker = testBroker(endpoints.kafkaBrokers);
      const reader = { groupId: `bulk-crash-${Date.now()}`, topic: `${stack.topics.prefix}onto.changes.objects` };
      const consumer = await broker.consumer({ groupId: reader.groupId, topics: [reader.topic], fromBeginning: true });
      let records = 0;
      try {
        await consumer.run(async (batch) => {
          for (const m of batch.messages) {
            if (!String(m.key).startsWith(`${W}/Item/`)) continue;
            records++;
            ids.add(String(m.headers['onto-event-id']));
            keys.add(String(m.key));
          }
        });
        await eventually(
          () => `${steps.length * N} records (have ${records})`,
          () => records >= steps.length * N,
          {
            timeoutMs: 60_000,
            intervalMs: 100,
          },
        );
        // Nothing publishes any more: reading to the end shows anything beyond too.
        await committedToEnd(broker, reader.groupId, reader.topic, { timeoutMs: 60_000 });
      } finally {
        await consumer.disconnect();
      }
      // At least once: a batch the killed process published but had not marked sent goes again,
      // with the same event ids, which consumers skip (their inbox).
      expect(records).toBeGreaterThanOrEqual(steps.length * N);
      expect(ids.size).toBe(steps.length * N);
      expect(keys.size).toBe(steps.length * N);
    } finally {
      await db.end().catch(() => {});
      await data.stop().catch(() => {});
      await stack.close();
    }
  }, 240_000);
});
