import { fileURLToPath } from 'node:url';
import { builtForProcesses, eventually, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { startService } from '../bench/lib/services.js';
import { benchStack, Item } from '../bench/lib/stack.js';

// data runs as a real process from its compiled server (./onto test builds it first), so that it
// can be killed with SIGKILL in the middle of its write groups.
const built = builtForProcesses([fileURLToPath(new URL('../services/data/dist/server.js', import.meta.url))]);
const W = 'crash';

describe.runIf(built)('data killed while it commits writes in groups', () => {
  it('keeps every answered write, and every write whole: head, history row and change event together', async () => {
    // One transaction slot: under 64 writers nearly every write is committed in a group.
    const stack = await benchStack({ dataEnv: { WRITE_GROUPS_IN_FLIGHT: '1' } });
    let restarted: Awaited<ReturnType<typeof startService>> | undefined;
    const db = new pg.Client(stack.dataDb.url);
    try {
      await stack.world(W, { objectTypes: { Item } });
      const answered = new Map<string, number>(); // pk → highest version answered 2xx
      let answers = 0;
      let killed: Promise<void> | undefined;
      const put = (pk: string, amount: number) =>
        fetch(`${stack.data.url}/v1/worlds/${W}/objects/Item/${pk}`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.token}` },
          body: JSON.stringify({ properties: { id: pk, name: `item ${pk}`, amount, status: 'open' } }),
        });
      // The writes were being committed in groups when the process died.
      let grouped = 0;
      const metricsThenKill = async () => {
        const metrics = await (await fetch(`${stack.data.url}/metrics`)).text();
        grouped = Number(metrics.match(/^onto_data_grouped_writes_total\{[^}]*\} (\d+)/m)?.[1] ?? 0);
        await stack.data.kill();
      };
      // 64 writers, each rewriting five objects of its own; the process dies after 300 answers.
      await Promise.all(
        Array.from({ length: 64 }, async (_, w) => {
          for (let i = 1; killed === undefined; i++) {
            const pk = `w${w}-${i % 5}`;
            const res = await put(pk, i).catch(() => undefined);
            if (!res) return;
            if (res.status !== 200 && res.status !== 201) throw new Error(`${res.status}: ${await res.text()}`);
            const { version } = (await res.json()) as { version: number };
            answered.set(pk, Math.max(answered.get(pk) ?? 0, version));
            if (++answers >= 300 && killed === undefined) {
              killed = metricsThenKill();
            }
          }
        }),
      );
      await killed;
      expect(answers).toBeGreaterThanOrEqual(300);
      expect(grouped).toBeGreaterThan(100);

      await db.connect();
      // Every answered write is stored…
      const { rows: heads } = await db.query<{ pk: string; version: number }>(
        'SELECT pk, version FROM object_heads WHERE world_id = $1',
        [W],
      );
      const head = new Map(heads.map((h) => [h.pk, h.version]));
      for (const [pk, version] of answered) expect(head.get(pk), pk).toBeGreaterThanOrEqual(version);
      // …and every stored write is whole: versions 1…n (history, then the head), one change event per version.
      const { rows: broken } = await db.query(
        `SELECT h.pk, h.version, count(o.id)::int AS events
           FROM object_versions h
           LEFT JOIN outbox o ON o.partition_key = $1 || '/Item/' || h.pk
                             AND (o.body::jsonb ->> 'version')::int = h.version
          WHERE h.world_id = $1
          GROUP BY h.pk, h.version
         HAVING count(o.id) <> 1`,
        [W],
      );
      expect(broken).toEqual([]);
      const { rows: gaps } = await db.query(
        `SELECT pk FROM object_versions WHERE world_id = $1 GROUP BY pk
         HAVING count(*) <> max(version) OR min(version) <> 1`,
        [W],
      );
      expect(gaps).toEqual([]);
      const { rows: counts } = await db.query<{ history: number; events: number; latest: number }>(
        `SELECT (SELECT count(*)::int FROM object_versions WHERE world_id = $1) AS history,
                (SELECT count(*)::int FROM outbox WHERE topic LIKE '%changes.objects') AS events,
                (SELECT count(*)::int FROM object_heads h WHERE world_id = $1
                    AND version = (SELECT max(version) FROM object_versions x WHERE x.world_id = h.world_id AND x.pk = h.pk)) AS latest`,
        [W],
      );
      expect(counts[0]?.events).toBe(counts[0]?.history);
      expect(counts[0]?.latest).toBe(heads.length);

      // A new process takes over where the killed one stopped.
      const endpoints = testEndpoints();
      restarted = await startService('data', {
        REDIS_URL: endpoints.redisUrl,
        KAFKA_BROKERS: endpoints.kafkaBrokers,
        ONTO_TOPIC_PREFIX: stack.topics.prefix,
        DATABASE_URL: stack.dataDb.url,
      });
      const [pk, version] = [...answered][0] as [string, number];
      // Until its identity replica has caught up with control it answers 503 + Retry-After, as
      // documented: the killed process's consumer keeps the identity partition until its session
      // times out (10 s, ADR 6).
      const url = `${restarted.url}/v1/worlds/${W}/objects/Item/${pk}`;
      let refusal = '';
      const again = await eventually(
        () => `an answer other than 503 (the last: ${refusal})`,
        async () => {
          const res = await fetch(url, {
            method: 'PUT',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.token}` },
            body: JSON.stringify({ properties: { id: pk, name: `item ${pk}`, amount: -1, status: 'open' } }),
          });
          if (res.status !== 503) return res;
          refusal = await res.text();
          return undefined;
        },
        { timeoutMs: 40_000, intervalMs: 250 },
      );
      expect(again.status, refusal).toBe(200);
      expect(((await again.json()) as { version: number }).version).toBe((head.get(pk) ?? version) + 1);
    } finally {
      await db.end().catch(() => {});
      await restarted?.stop();
      await stack.close();
    }
  }, 120_000);
});
