import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BadRequest,
  HttpProblem,
  type Principal,
  problemResponses,
  refusal,
  Unavailable,
  verifyAccessToken,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { notProvisioned } from '../schema/lookup.js';
import { compileEventFilter } from './filter.js';
import { LiveHub, PositionGone } from './hub.js';
import { LIVE_EVENT_TYPES, LIVE_TOPIC_NAMES, type LiveTopic, topicIndexOfType } from './topics.js';

export interface LiveOptions {
  replayEvents: number;
  replayBytes: number;
  replaySeconds: number;
  bufferEvents: number;
  heartbeatMs: number;
  authCheckMs: number;
}

declare module 'fastify' {
  interface FastifyInstance {
    liveHub: LiveHub;
  }
}

export class Gone extends HttpProblem {
  constructor(detail: string, extensions: Record<string, unknown> = {}) {
    super(410, 'gone', 'Gone', detail, extensions);
  }
}

const BEARER = /^Bearer +(.+)$/i;

/** `a,b` or repeated parameters → the list of names. */
const names = (raw: string | string[] | undefined): string[] =>
  [raw ?? []]
    .flat()
    .flatMap((s) => s.split(','))
    .map((s) => s.trim())
    .filter(Boolean);

/**
 * `GET /v1/worlds/{world}/events`: the world's events as Server-Sent Events, resumable on any
 * instance from the `id:` of the last event seen (docs/adr/0059).
 */
export default fp(
  async (fastify: FastifyInstance, opts: LiveOptions) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const hub = new LiveHub({
      broker: app.broker,
      prefix: app.topicPrefix,
      logger: app.log.child({ component: 'live' }) as never,
      registry: app.metrics,
      ...opts,
    });
    app.decorate('liveHub', hub);
    // In the background, retried while Kafka is away, as the service's consumers are.
    let stopping = false;
    app.addHook('onReady', async () => {
      const start = async (attempt: number): Promise<void> => {
        if (stopping) return;
        try {
          await hub.start();
        } catch (err) {
          app.log.warn({ err, attempt }, 'live event hub did not start; retrying');
          await hub.stop().catch(() => {});
          hub.reset();
          await new Promise((r) => setTimeout(r, Math.min(5000, 200 * 2 ** attempt)));
          return start(attempt + 1);
        }
      };
      void start(0);
    });
    app.addHook('onClose', async () => {
      stopping = true;
      await hub.stop();
    });

    app.get(
      '/v1/worlds/:world/events',
      {
        // EventSource cannot send headers: a browser passes its access token as access_token.
        onRequest: async (request: FastifyRequest) => {
          const token = (request.query as Record<string, unknown>).access_token;
          if (request.headers.authorization === undefined && typeof token === 'string') {
            request.headers.authorization = `Bearer ${token}`;
          }
        },
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['live'],
          summary: "The world's events as Server-Sent Events (text/event-stream)",
          description:
            'Each event is `id: <position>`, `event: <type>`, `data: <the event as a structured CloudEvent, the envelope in data>`. Reconnect with `Last-Event-ID: <position>` to go on exactly after it, on any instance; a position older than what is kept answers 410: list again, then subscribe with `from=<commit>`, the `commit` the list answered (objects list, links of an object, object-set query). Comment lines every 15 s keep the connection open. A client that falls too far behind gets `event: overflow` with its last position and is closed; one whose token expires or is revoked, or who loses the role, gets `event: closed` and is closed within a second. In a browser, pass the access token as `access_token`.',
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          querystring: Type.Object({
            topics: Type.Optional(
              Type.String({
                maxLength: 200,
                description: `comma-separated, of ${LIVE_TOPIC_NAMES.join(', ')}; default all of them`,
              }),
            ),
            types: Type.Optional(
              Type.String({
                maxLength: 2000,
                description: 'comma-separated event types; default every type of the topics',
              }),
            ),
            where: Type.Optional(
              Type.Union(
                [Type.String({ maxLength: 1100 }), Type.Array(Type.String({ maxLength: 1100 }), { maxItems: 20 })],
                {
                  description:
                    "`<property>:<eq|ne|gt|gte|lt|lte>:<value>` (repeatable; all must hold) on an object change's properties (after it, before it for a deletion), else on the event's payload",
                },
              ),
            ),
            from: Type.Optional(
              Type.String({
                pattern: '^[0-9]{1,18}$',
                description:
                  "a data commit, as the `commit` a list or object-set query answers: start exactly after it (data's topics; the others from the oldest event kept). Ignored with Last-Event-ID",
              }),
            ),
            access_token: Type.Optional(
              Type.String({ maxLength: 4096, description: 'for EventSource, which sends no header' }),
            ),
          }),
          headers: Type.Object({ 'last-event-id': Type.Optional(Type.String({ maxLength: 4096 })) }),
          response: {
            200: {
              description: 'the event stream',
              content: { 'text/event-stream': { schema: Type.String() } },
            },
            ...problemResponses(400, 401, 403, 404, 410, 503),
          },
        },
      },
      async (request, reply) => {
        const { world } = request.params;
        const q = request.query;
        const faults: { path: string; message: string }[] = [];
        const topicNames = names(q.topics);
        for (const t of topicNames) {
          if (!(LIVE_TOPIC_NAMES as string[]).includes(t)) {
            faults.push({
              path: 'querystring/topics',
              message: `unknown topic ${JSON.stringify(t)}; use ${LIVE_TOPIC_NAMES.join(', ')}`,
            });
          }
        }
        const typeNames = names(q.types);
        for (const t of typeNames) {
          if (!(LIVE_EVENT_TYPES as string[]).includes(t)) {
            faults.push({ path: 'querystring/types', message: `unknown event type ${JSON.stringify(t)}` });
          }
        }
        const where = q.where === undefined ? [] : [q.where].flat();
        const filter = where.length > 0 ? compileEventFilter(where, 'querystring/where') : null;
        if (filter !== null && 'errors' in filter) faults.push(...filter.errors);
        if (faults.length > 0) throw new BadRequest('the subscription cannot be made as asked', faults);

        // The topics followed: those named, else those of the types named, else all.
        const chosen = new Set<number>(
          topicNames.length > 0
            ? topicNames.map((t) => LIVE_TOPIC_NAMES.indexOf(t as LiveTopic))
            : typeNames.length > 0
              ? typeNames.map((t) => topicIndexOfType(t) as number)
              : LIVE_TOPIC_NAMES.map((_, i) => i),
        );
        for (const t of typeNames) {
          if (!chosen.has(topicIndexOfType(t) as number)) {
            faults.push({ path: 'querystring/types', message: `${t} is not carried by the topics asked for` });
          }
        }
        if (faults.length > 0) throw new BadRequest('the subscription cannot be made as asked', faults);
        const topics = [...chosen].sort((a, b) => a - b);

        const { rowCount } = await app.pg.query('SELECT 1 FROM worlds WHERE id = $1', [world]);
        if (!rowCount) throw notProvisioned(world);
        const codec = hub.codec(world, topics);
        if (!codec) throw new Unavailable('the live event reader is starting; retry shortly', 1);
        const lastEventId = request.headers['last-event-id'];
        const after = lastEventId === undefined ? undefined : codec.decode(lastEventId);
        if (lastEventId !== undefined && after === undefined) {
          throw new BadRequest('Last-Event-ID is not a position of this subscription', [
            {
              path: 'headers/last-event-id',
              message: `not a position of world ${world} with these topics (take the id: of an event of the same subscription)`,
            },
          ]);
        }

        const token = BEARER.exec(request.headers.authorization ?? '')?.[1] ?? '';
        const replica = app.identityReplica;
        const authorised = async (): Promise<string | null> => {
          const claims = await verifyAccessToken(token, replica);
          const principal: Principal | null = await replica.principal(claims);
          if (!principal) return 'the access token has been revoked';
          return refusal(principal, { role: 'viewer' }, world);
        };
        const spec = {
          world,
          topics,
          types: typeNames.length > 0 ? new Set(typeNames) : null,
          filter: filter === null || 'errors' in filter ? null : filter,
          authorised,
          ...(after ? { after } : q.from !== undefined ? { fromCommit: Number(q.from) } : {}),
        };

        const res = reply.raw;
        // Checked before the head is written, so that a 410 is still a problem document.
        try {
          hub.checkResumable(spec);
        } catch (error) {
          if (!(error instanceof PositionGone)) throw error;
          throw new Gone(
            'this position is older than the events kept for resuming: list the objects again, then subscribe with from=<the commit the list answered>',
            { field: after ? 'headers/last-event-id' : 'querystring/from' },
          );
        }
        reply.hijack();
        // The stream is the connection's last response: when it ends, the connection closes.
        res.shouldKeepAlive = false;
        res.writeHead(200, {
          ...(reply.getHeaders() as Record<string, string>),
          'content-type': 'text/event-stream; charset=utf-8',
          'cache-control': 'no-cache, no-transform',
          'x-accel-buffering': 'no',
        });
        res.write(': onto live events\n\n');
        hub.subscribe(spec, codec, res);
      },
    );
  },
  { name: 'onto-data-live', dependencies: ['onto-identity'] },
);
