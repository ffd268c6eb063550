import { equalJitter, everyInProcess, type InProcessTask, type Listening, listenWithReconnect } from '@onto/shared';
import type pg from 'pg';
import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { AddressPolicy } from './address.js';
import { WEBHOOK_CHANNEL } from './enqueue.js';
import { type Attempt, send } from './send.js';
import { signature } from './sign.js';

export interface DelivererOptions {
  pool: pg.Pool;
  logger: Logger;
  registry: Registry;
  policy: AddressPolicy;
  retryMs: number;
  disableAfterMs: number;
  retryBaseMs: number;
  retryMaxMs: number;
  timeoutMs: number;
  concurrency: number;
  logRetentionMs: number;
  /** Fallback poll when no NOTIFY arrives (retries fall due without one). */
  pollMs?: number;
}

interface Claimed {
  id: string;
  world_id: string;
  webhook: string;
  event_id: string;
  body: string;
  attempts: number;
  created_at: Date;
  url: string;
  secrets: string[];
}

/**
 * Makes the queued webhook deliveries (docs/adr/0060): claims due ones with FOR UPDATE SKIP LOCKED
 * (any number of instances), at most one per webhook and ordering key at a time and in order, marks
 * each claimed with a lease (a crash makes it due again: at-least-once), POSTs it signed, then
 * records the attempt and either finishes it, schedules a retry with exponential backoff and jitter,
 * or dead-letters it once WEBHOOK_RETRY_HOURS have passed. The claim and schedule are plain rows,
 * so this can move onto a shared job runner without changing the tables' meaning.
 */
export class WebhookDeliverer {
  private inFlight = 0;
  private stopped = true;
  private listening: Listening | undefined;
  private timer: InProcessTask | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private readonly metrics;

  constructor(private readonly opts: DelivererOptions) {
    const labelNames = ['world', 'webhook'] as const;
    this.metrics = {
      deliveries: new Counter({
        name: 'onto_webhook_deliveries_total',
        help: 'webhook delivery attempts by outcome: delivered, failed (to be retried), dead',
        labelNames: [...labelNames, 'outcome'],
        registers: [opts.registry],
      }),
      latency: new Histogram({
        name: 'onto_webhook_delivery_seconds',
        help: 'time from a delivery attempt to the receiver’s answer',
        labelNames,
        buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
        registers: [opts.registry],
      }),
    };
    const pool = opts.pool;
    const backlog = new Gauge({
      name: 'onto_webhook_backlog',
      help: 'deliveries waiting per webhook (pending), and dead-lettered',
      labelNames: [...labelNames, 'state'],
      registers: [opts.registry],
      async collect() {
        // A scrape while PostgreSQL is away keeps the last values rather than failing /metrics.
        const rows = await pool
          .query<{ world_id: string; webhook: string; state: string; n: number }>(
            `SELECT world_id, webhook, state, count(*)::int AS n FROM webhook_deliveries
              WHERE state IN ('pending', 'dead') GROUP BY 1, 2, 3`,
          )
          .then((r) => r.rows)
          .catch(() => undefined);
        if (!rows) return;
        backlog.reset();
        for (const r of rows) backlog.set({ world: r.world_id, webhook: r.webhook, state: r.state }, r.n);
      },
    });
    const active = new Gauge({
      name: 'onto_webhook_active',
      help: '1 while a webhook is active, 0 once disabled (by its owner or after failing for WEBHOOK_DISABLE_AFTER_HOURS)',
      labelNames: [...labelNames, 'reason'],
      registers: [opts.registry],
      async collect() {
        const rows = await pool
          .query<{ world_id: string; name: string; active: boolean; disabled_reason: string | null }>(
            'SELECT world_id, name, active, disabled_reason FROM webhooks',
          )
          .then((r) => r.rows)
          .catch(() => undefined);
        if (!rows) return;
        active.reset();
        for (const r of rows) {
          active.set(
            { world: r.world_id, webhook: r.name, reason: r.active ? '' : r.disabled_reason ? 'failing' : 'owner' },
            r.active ? 1 : 0,
          );
        }
      },
    });
  }

  async start(): Promise<void> {
    this.stopped = false;
    // Listened to again when PostgreSQL drops the connection (docs/adr/0079): the poll covers the gap.
    this.listening = listenWithReconnect(this.opts.pool, WEBHOOK_CHANNEL, () => this.kick(), {
      retryMs: this.opts.pollMs ?? 1000,
      logger: this.opts.logger,
      what: 'webhook deliverer',
    });
    await this.listening.ready;
    this.timer = everyInProcess('polling webhook deliveries', this.opts.pollMs ?? 1000, () => this.kick());
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.stop();
    await this.running;
    while (this.inFlight > 0) await new Promise((r) => setTimeout(r, 20));
    await this.listening?.stop();
    this.listening = undefined;
  }

  /** Claims and starts deliveries while there are due ones and room. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.fill()
      .catch((err) => this.opts.logger.warn({ err }, 'could not claim webhook deliveries'))
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  private async fill(): Promise<void> {
    while (!this.stopped) {
      const room = this.opts.concurrency - this.inFlight;
      if (room <= 0) return;
      const claimed = await this.claim(room);
      for (const c of claimed) {
        this.inFlight++;
        void this.deliver(c)
          .catch((err) => this.opts.logger.error({ err, delivery: c.id }, 'webhook delivery bookkeeping failed'))
          .finally(() => {
            this.inFlight--;
            this.kick();
          });
      }
      if (claimed.length < room) return;
    }
  }

  private async claim(limit: number): Promise<Claimed[]> {
    // A lease past the attempt's timeout: a claimant that died leaves the row due again.
    const { rows } = await this.opts.pool.query<Claimed>(
      `WITH due AS (
         SELECT d.world_id, d.id FROM webhook_deliveries d
           JOIN webhooks w ON w.world_id = d.world_id AND w.name = d.webhook AND w.active
          WHERE d.state = 'pending' AND d.run_at <= now()
            AND NOT EXISTS (
              SELECT 1 FROM webhook_deliveries e
               WHERE e.world_id = d.world_id AND e.id = d.after_id AND e.state = 'pending')
          ORDER BY d.run_at, d.id
          LIMIT $1
          FOR UPDATE OF d SKIP LOCKED)
       UPDATE webhook_deliveries d
          SET run_at = now() + make_interval(secs => $2::double precision), attempts = d.attempts + 1
         FROM due, webhooks w
        WHERE d.world_id = due.world_id AND d.id = due.id AND w.world_id = d.world_id AND w.name = d.webhook
       RETURNING d.id, d.world_id, d.webhook, d.event_id, d.body, d.attempts, d.created_at, w.url,
                 array_remove(ARRAY[w.secret, CASE WHEN w.previous_until > now() THEN w.previous_secret END], NULL) AS secrets`,
      [limit, (this.opts.timeoutMs * 3) / 1000],
    );
    return rows;
  }

  private async deliver(c: Claimed): Promise<void> {
    const timestamp = Math.floor(Date.now() / 1000);
    const attempt: Attempt = await send(
      this.opts.policy,
      c.url,
      {
        'user-agent': 'onto-webhooks/1',
        'webhook-id': c.event_id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signature(c.secrets, c.event_id, timestamp, c.body),
      },
      c.body,
      this.opts.timeoutMs,
    );
    const ok = attempt.status !== null && attempt.status >= 200 && attempt.status < 300;
    const labels = { world: c.world_id, webhook: c.webhook };
    this.metrics.latency.observe(labels, attempt.latencyMs / 1000);
    const error = ok ? null : (attempt.error ?? `answered ${attempt.status}`);
    const expired = Date.now() - c.created_at.getTime() >= this.opts.retryMs;
    const outcome = ok ? 'delivered' : expired ? 'dead' : 'failed';
    const retryInMs = equalJitter(
      Math.min(this.opts.retryMaxMs, this.opts.retryBaseMs * 2 ** Math.min(30, c.attempts - 1)),
    );
    await this.opts.pool.query(
      `WITH attempt AS (
         INSERT INTO webhook_attempts (delivery_id, world_id, webhook, attempt, status, latency_ms, response, error)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)),
       delivery AS (
         UPDATE webhook_deliveries
            SET state = CASE $9::text WHEN 'failed' THEN 'pending' ELSE $9::text END,
                finished_at = CASE WHEN $9::text = 'failed' THEN NULL ELSE now() END,
                run_at = now() + make_interval(secs => $10::double precision),
                last_error = $8
          WHERE world_id = $2 AND id = $1)
       UPDATE webhooks
          SET failing_since = CASE WHEN $9::text = 'delivered' THEN NULL ELSE coalesce(failing_since, now()) END,
              active = active AND NOT ($9::text <> 'delivered' AND coalesce(failing_since < now() - make_interval(secs => $11::double precision), false)),
              disabled_reason = CASE
                WHEN active AND $9::text <> 'delivered' AND coalesce(failing_since < now() - make_interval(secs => $11::double precision), false)
                THEN 'every delivery failed since ' || failing_since::text
                ELSE disabled_reason END
        WHERE world_id = $2 AND name = $3
          -- A success on a webhook that is not failing changes nothing: no row lock, no new version.
          AND ($9::text <> 'delivered' OR failing_since IS NOT NULL)`,
      [
        c.id,
        c.world_id,
        c.webhook,
        c.attempts,
        attempt.status,
        attempt.latencyMs,
        attempt.response,
        error,
        outcome,
        retryInMs / 1000,
        this.opts.disableAfterMs / 1000,
      ],
    );
    this.metrics.deliveries.inc({ ...labels, outcome });
    if (!ok) {
      this.opts.logger.debug(
        { delivery: c.id, webhook: c.webhook, attempt: c.attempts, error, outcome },
        'webhook delivery failed',
      );
    }
  }

  /** Deletes finished deliveries (and their attempts) older than the log's retention. */
  async prune(): Promise<void> {
    await this.opts.pool.query(
      `DELETE FROM webhook_deliveries WHERE state = 'delivered' AND finished_at < now() - make_interval(secs => $1::double precision)`,
      [this.opts.logRetentionMs / 1000],
    );
  }
}
