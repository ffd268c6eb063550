import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BODY_LIMITS,
  decodeCursor,
  encodeCursor,
  type FieldError,
  inTransaction,
  NotFound,
  problemResponses,
  recordAudit,
  runPeriodically,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { compileEventFilter } from '../live/filter.js';
import { LIVE_EVENT_TYPES, LIVE_TOPICS } from '../live/topics.js';
import { notProvisioned } from '../schema/lookup.js';
import { AddressPolicy, AddressRefused } from './address.js';
import { WebhookDeliverer } from './deliverer.js';
import { enqueueDeliveries } from './enqueue.js';
import { newSecret } from './sign.js';

export interface WebhookOptions {
  retryHours: number;
  disableAfterHours: number;
  retryBaseMs: number;
  retryMaxMs: number;
  timeoutMs: number;
  concurrency: number;
  logRetentionHours: number;
  allowHosts: string;
}

const NAME = '^[a-z][a-z0-9-]{0,62}$';
const URL_MAX = 2048;

const WebhookBody = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: URL_MAX, description: 'http(s) URL the deliveries are POSTed to' }),
    events: Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
      minItems: 1,
      maxItems: 50,
      uniqueItems: true,
      description: `event types to deliver: ${LIVE_EVENT_TYPES.join(', ')}`,
    }),
    where: Type.Optional(
      Type.Array(Type.String({ maxLength: 1100 }), {
        maxItems: 20,
        description:
          "`<property>:<eq|ne|gt|gte|lt|lte>:<value>`, all must hold: on an object change's properties, else on the payload",
      }),
    ),
    active: Type.Optional(Type.Boolean({ default: true })),
  },
  { additionalProperties: false },
);

const Webhook = Type.Object({
  world: Type.String(),
  name: Type.String(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  where: Type.Array(Type.String()),
  active: Type.Boolean(),
  disabledReason: Type.Union([Type.String(), Type.Null()], { description: 'why it was disabled after failing' }),
  failingSince: Type.Union([Type.String(), Type.Null()]),
  backlog: Type.Integer({ description: 'deliveries waiting' }),
  dead: Type.Integer({ description: 'dead-lettered deliveries (onto-admin webhooks dead|redrive)' }),
  secondSecretUntil: Type.Union([Type.String(), Type.Null()], {
    description: 'while a rotation overlaps: until when the previous secret still signs',
  }),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  secret: Type.Optional(Type.String({ description: 'the signing secret: shown only when made or rotated' })),
});

const Delivery = Type.Object({
  id: Type.String(),
  eventId: Type.String({ description: 'webhook-id: the event id, the same on every attempt' }),
  eventType: Type.String(),
  state: Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('dead')]),
  attempt: Type.Integer(),
  at: Type.String(),
  status: Type.Union([Type.Integer(), Type.Null()], {
    description: "the receiver's HTTP status, null without an answer",
  }),
  latencyMs: Type.Integer(),
  response: Type.Union([Type.String(), Type.Null()], { description: 'at most 1 KB of the answer' }),
  error: Type.Union([Type.String(), Type.Null()]),
});

const DeadDelivery = Type.Object({
  id: Type.String(),
  world: Type.String(),
  webhook: Type.String(),
  eventId: Type.String(),
  eventType: Type.String(),
  attempts: Type.Integer(),
  createdAt: Type.String(),
  lastError: Type.Union([Type.String(), Type.Null()]),
});

interface WebhookRow {
  world_id: string;
  name: string;
  url: string;
  events: string[];
  filter: string[];
  active: boolean;
  disabled_reason: string | null;
  failing_since: string | null;
  backlog: number;
  dead: number;
  previous_until: string | null;
  created_at: string;
  updated_at: string;
}

const SELECT_WEBHOOK = `
  SELECT w.world_id, w.name, w.url, w.events, w.filter, w.active, w.disabled_reason,
         to_json(w.failing_since)#>>'{}' AS failing_since,
         CASE WHEN w.previous_until > now() THEN to_json(w.previous_until)#>>'{}' END AS previous_until,
         to_json(w.created_at)#>>'{}' AS created_at, to_json(w.updated_at)#>>'{}' AS updated_at,
         (SELECT count(*)::int FROM webhook_deliveries d WHERE d.world_id = w.world_id AND d.webhook = w.name AND d.state = 'pending') AS backlog,
         (SELECT count(*)::int FROM webhook_deliveries d WHERE d.world_id = w.world_id AND d.webhook = w.name AND d.state = 'dead') AS dead
    FROM webhooks w`;

const present = (r: WebhookRow): Static<typeof Webhook> => ({
  world: r.world_id,
  name: r.name,
  url: r.url,
  events: r.events,
  where: r.filter,
  active: r.active,
  disabledReason: r.disabled_reason,
  failingSince: r.failing_since,
  backlog: r.backlog,
  dead: r.dead,
  secondSecretUntil: r.previous_until,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/**
 * Webhooks (docs/adr/0060): `PUT|GET|DELETE /v1/worlds/{w}/webhooks/{name}`, the secret's rotation,
 * the delivery log, the consumer that queues deliveries and the deliverer that makes them.
 */
export default fp(
  async (fastify: FastifyInstance, opts: WebhookOptions) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const policy = new AddressPolicy(opts.allowHosts);
    const hour = 3_600_000;
    const deliverer = new WebhookDeliverer({
      pool: app.pg,
      logger: app.log.child({ component: 'webhooks' }) as never,
      registry: app.metrics,
      policy,
      retryMs: opts.retryHours * hour,
      disableAfterMs: opts.disableAfterHours * hour,
      retryBaseMs: opts.retryBaseMs,
      retryMaxMs: opts.retryMaxMs,
      timeoutMs: opts.timeoutMs,
      concurrency: opts.concurrency,
      logRetentionMs: opts.logRetentionHours * hour,
    });
    app.addConsumer({
      name: 'data-webhooks',
      topics: Object.values(LIVE_TOPICS),
      apply: enqueueDeliveries,
      // A cause on a topic this group does not read never comes: deliver rather than dead-letter.
      deferral: { onExhausted: 'apply', maxAttempts: 3 },
    });
    app.addHook('onReady', () => deliverer.start());
    app.addHook('onClose', () => deliverer.stop());
    runPeriodically(app, 'webhook log pruning', 10 * 60_000, () => deliverer.prune());

    const params = Type.Object({ world: Type.String({ pattern: WORLD_ID }), name: Type.String({ pattern: NAME }) });
    const worldExists = async (world: string) => {
      const { rowCount } = await app.pg.query('SELECT 1 FROM worlds WHERE id = $1', [world]);
      if (!rowCount) throw notProvisioned(world);
    };
    const one = async (world: string, name: string) => {
      const { rows } = await app.pg.query<WebhookRow>(`${SELECT_WEBHOOK} WHERE w.world_id = $1 AND w.name = $2`, [
        world,
        name,
      ]);
      const row = rows[0];
      if (!row) throw new NotFound(`webhook ${name} does not exist in world ${world}`);
      return row;
    };

    /** The faults of a webhook's body beyond its schema: its URL's scheme and address, its types, its filter. */
    async function check(body: Static<typeof WebhookBody>): Promise<FieldError[]> {
      const faults: FieldError[] = [];
      let url: URL | undefined;
      try {
        url = new URL(body.url);
      } catch {
        faults.push({ path: '/url', message: 'is not a URL' });
      }
      if (url && url.protocol !== 'http:' && url.protocol !== 'https:') {
        faults.push({ path: '/url', message: `must be http or https, not ${url.protocol.slice(0, -1)}` });
      } else if (url && (url.username || url.password)) {
        faults.push({ path: '/url', message: 'must not carry credentials' });
      } else if (url) {
        try {
          await policy.resolve(url.hostname);
        } catch (error) {
          if (!(error instanceof AddressRefused)) throw error;
          faults.push({ path: '/url', message: error.message });
        }
      }
      for (const [i, type] of body.events.entries()) {
        if (!(LIVE_EVENT_TYPES as string[]).includes(type)) {
          faults.push({ path: `/events/${i}`, message: `unknown event type ${JSON.stringify(type)}` });
        }
      }
      if (body.where && body.where.length > 0) {
        const compiled = compileEventFilter(body.where, '/where');
        if ('errors' in compiled) faults.push(...compiled.errors);
      }
      return faults;
    }

    app.put(
      '/v1/worlds/:world/webhooks/:name',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['webhooks'],
          summary: 'Create or replace a webhook; a new one answers its signing secret, once',
          description:
            'Deliveries are POSTed per the Standard Webhooks specification: `webhook-id` (the event id, the same on every retry), `webhook-timestamp`, `webhook-signature` (`v1,` base64 HMAC-SHA256 of `id.timestamp.body`), the event as a structured CloudEvent. Per object in order, at least once, retried with exponential backoff for WEBHOOK_RETRY_HOURS, then dead-lettered. Loopback, private, link-local and metadata addresses are refused unless ONTO_WEBHOOK_ALLOW_HOSTS lists them.',
          params,
          body: WebhookBody,
          response: { 200: Webhook, 201: Webhook, ...problemResponses(400, 401, 403, 404, 413, 422, 503) },
        },
      },
      async (request, reply) => {
        const { world, name } = request.params;
        const body = request.body;
        await worldExists(world);
        const faults = await check(body);
        if (faults.length > 0) throw new Unprocessable('the webhook cannot be saved as given', faults);
        const secret = newSecret();
        const active = body.active ?? true;
        const created = await inTransaction(app.pg, async (tx) => {
          const { rows } = await tx.query<{ created: boolean }>(
            `INSERT INTO webhooks (world_id, name, url, events, filter, active, secret)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (world_id, name) DO UPDATE
              SET url = excluded.url, events = excluded.events, filter = excluded.filter, active = excluded.active,
                  failing_since = CASE WHEN excluded.active AND NOT webhooks.active THEN NULL ELSE webhooks.failing_since END,
                  disabled_reason = CASE WHEN excluded.active THEN NULL ELSE webhooks.disabled_reason END,
                  updated_at = now()
           RETURNING xmax = 0 AS created`,
            [world, name, body.url, body.events, body.where ?? [], active, secret],
          );
          const created = rows[0]?.created === true;
          await recordAudit(tx, request, {
            action: 'webhook.put',
            result: created ? 'created' : 'updated',
            worldId: world,
            subject: name,
            detail: { url: body.url, events: body.events, active },
          });
          return created;
        });
        const row = present(await one(world, name));
        if (created) {
          reply.code(201);
          return { ...row, secret };
        }
        return row;
      },
    );

    app.get(
      '/v1/worlds/:world/webhooks/:name',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['webhooks'],
          summary: 'One webhook (never its secret), with its backlog and dead letters',
          params,
          response: { 200: Webhook, ...problemResponses(400, 401, 403, 404, 503) },
        },
      },
      async (request) => present(await one(request.params.world, request.params.name)),
    );

    app.get(
      '/v1/worlds/:world/webhooks',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['webhooks'],
          summary: "The world's webhooks",
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          response: {
            200: Type.Object({ webhooks: Type.Array(Webhook) }),
            ...problemResponses(400, 401, 403, 404, 503),
          },
        },
      },
      async (request) => {
        await worldExists(request.params.world);
        const { rows } = await app.pg.query<WebhookRow>(`${SELECT_WEBHOOK} WHERE w.world_id = $1 ORDER BY w.name`, [
          request.params.world,
        ]);
        return { webhooks: rows.map(present) };
      },
    );

    app.delete(
      '/v1/worlds/:world/webhooks/:name',
      {
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['webhooks'],
          summary: 'Delete a webhook with its queue and log',
          params,
          response: { 204: Type.Null(), ...problemResponses(400, 401, 403, 404, 503) },
        },
      },
      async (request, reply) => {
        const { world, name } = request.params;
        await inTransaction(app.pg, async (tx) => {
          const { rowCount } = await tx.query('DELETE FROM webhooks WHERE world_id = $1 AND name = $2', [world, name]);
          if (!rowCount) throw new NotFound(`webhook ${name} does not exist in world ${world}`);
          await recordAudit(tx, request, {
            action: 'webhook.delete',
            result: 'deleted',
            worldId: world,
            subject: name,
          });
        });
        return reply.code(204).send(null);
      },
    );

    app.post(
      '/v1/worlds/:world/webhooks/:name/rotate-secret',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['webhooks'],
          summary: 'A new signing secret, shown once; the previous one keeps signing too for overlapSeconds',
          params,
          body: Type.Optional(
            Type.Object(
              { overlapSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 30 * 86_400, default: 86_400 })) },
              { additionalProperties: false },
            ),
          ),
          response: { 200: Webhook, ...problemResponses(400, 401, 403, 404, 503) },
        },
      },
      async (request) => {
        const { world, name } = request.params;
        const overlap = request.body?.overlapSeconds ?? 86_400;
        const secret = newSecret();
        await inTransaction(app.pg, async (tx) => {
          const { rowCount } = await tx.query(
            `UPDATE webhooks SET previous_secret = secret, previous_until = now() + make_interval(secs => $3), secret = $4, updated_at = now()
              WHERE world_id = $1 AND name = $2`,
            [world, name, overlap, secret],
          );
          if (!rowCount) throw new NotFound(`webhook ${name} does not exist in world ${world}`);
          await recordAudit(tx, request, {
            action: 'webhook.secret.rotate',
            result: 'updated',
            worldId: world,
            subject: name,
            detail: { overlap },
          });
        });
        return { ...present(await one(world, name)), secret };
      },
    );

    app.get(
      '/v1/worlds/:world/webhooks/:name/deliveries',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['webhooks'],
          summary: "The webhook's delivery attempts, newest first",
          params,
          querystring: Type.Object({
            limit: Type.Integer({ minimum: 1, maximum: 500, default: 50 }),
            cursor: Type.Optional(Type.String({ maxLength: 200 })),
          }),
          response: {
            200: Type.Object({ deliveries: Type.Array(Delivery), next: Type.Union([Type.String(), Type.Null()]) }),
            ...problemResponses(400, 401, 403, 404, 503),
          },
        },
      },
      async (request) => {
        const { world, name } = request.params;
        await one(world, name);
        const before = decodeCursor(request.query.cursor, (c) =>
          typeof c.b === 'string' && /^[0-9]+$/.test(c.b) ? c.b : undefined,
        );
        const { limit } = request.query;
        const { rows } = await app.pg.query<{
          id: string;
          event_id: string;
          event_type: string;
          state: 'pending' | 'delivered' | 'dead';
          attempt: number;
          at: string;
          status: number | null;
          latency_ms: number;
          response: string | null;
          error: string | null;
        }>(
          `SELECT a.id::text, d.event_id, d.event_type, d.state, a.attempt, to_json(a.at)#>>'{}' AS at, a.status,
                  a.latency_ms, a.response, a.error
             FROM webhook_attempts a JOIN webhook_deliveries d ON d.world_id = a.world_id AND d.id = a.delivery_id
            WHERE a.world_id = $1 AND a.webhook = $2 AND ($3::bigint IS NULL OR a.id < $3)
            ORDER BY a.id DESC LIMIT $4`,
          [world, name, before ?? null, limit + 1],
        );
        const page = rows.slice(0, limit);
        return {
          deliveries: page.map((r) => ({
            id: r.id,
            eventId: r.event_id,
            eventType: r.event_type,
            state: r.state,
            attempt: r.attempt,
            at: r.at,
            status: r.status,
            latencyMs: r.latency_ms,
            response: r.response,
            error: r.error,
          })),
          next: rows.length > limit ? encodeCursor({ b: page.at(-1)?.id }) : null,
        };
      },
    );

    // Operators (onto-admin webhooks dead|redrive): the dead letters, and putting them back.
    const DeadQuery = Type.Object({
      world: Type.Optional(Type.String({ pattern: WORLD_ID })),
      webhook: Type.Optional(Type.String({ pattern: NAME })),
      limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
    });
    app.get(
      '/v1/admin/webhooks/dead',
      {
        preHandler: app.authorize({ admin: true }),
        schema: {
          tags: ['admin'],
          summary: 'Dead-lettered webhook deliveries, oldest first',
          querystring: DeadQuery,
          response: { 200: Type.Object({ dead: Type.Array(DeadDelivery) }), ...problemResponses(400, 401, 403, 503) },
        },
      },
      async (request) => {
        const { world, webhook, limit } = request.query;
        const { rows } = await app.pg.query<{
          id: string;
          world_id: string;
          webhook: string;
          event_id: string;
          event_type: string;
          attempts: number;
          created_at: string;
          last_error: string | null;
        }>(
          `SELECT id::text, world_id, webhook, event_id, event_type, attempts, to_json(created_at)#>>'{}' AS created_at, last_error
             FROM webhook_deliveries
            WHERE state = 'dead' AND ($1::text IS NULL OR world_id = $1) AND ($2::text IS NULL OR webhook = $2)
            ORDER BY id LIMIT $3`,
          [world ?? null, webhook ?? null, limit],
        );
        return {
          dead: rows.map((r) => ({
            id: r.id,
            world: r.world_id,
            webhook: r.webhook,
            eventId: r.event_id,
            eventType: r.event_type,
            attempts: r.attempts,
            createdAt: r.created_at,
            lastError: r.last_error,
          })),
        };
      },
    );
    app.post(
      '/v1/admin/webhooks/redrive',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ admin: true }),
        schema: {
          tags: ['admin'],
          summary: 'Queue dead-lettered deliveries again (a new retry window), in their original order',
          body: Type.Object(
            {
              world: Type.Optional(Type.String({ pattern: WORLD_ID })),
              webhook: Type.Optional(Type.String({ pattern: NAME })),
              ids: Type.Optional(Type.Array(Type.String({ pattern: '^[0-9]{1,18}$' }), { maxItems: 10_000 })),
            },
            { additionalProperties: false },
          ),
          response: { 200: Type.Object({ redriven: Type.Integer() }), ...problemResponses(400, 401, 403, 503) },
        },
      },
      async (request) => {
        const { world, webhook, ids } = request.body;
        const redriven = await inTransaction(app.pg, async (tx) => {
          const { rowCount } = await tx.query(
            `UPDATE webhook_deliveries SET state = 'pending', run_at = now(), created_at = now(), attempts = 0, finished_at = NULL
              WHERE state = 'dead' AND ($1::text IS NULL OR world_id = $1) AND ($2::text IS NULL OR webhook = $2)
                AND ($3::bigint[] IS NULL OR id = ANY($3))`,
            [world ?? null, webhook ?? null, ids ?? null],
          );
          await recordAudit(tx, request, {
            action: 'admin.webhooks.redrive',
            result: rowCount ? 'updated' : 'unchanged',
            worldId: world ?? null,
            subject: webhook ?? null,
            detail: { redriven: rowCount ?? 0 },
          });
          return rowCount ?? 0;
        });
        deliverer.kick();
        return { redriven };
      },
    );
  },
  { name: 'onto-data-webhooks', dependencies: ['onto-identity'] },
);
