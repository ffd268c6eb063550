import { readReplicaConfigSchema, replicaConfigSchema, serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The data service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4002),
  replicaConfigSchema(),
  readReplicaConfigSchema(),
  Type.Object({
    WRITE_GROUPS_IN_FLIGHT: Type.Integer({
      minimum: 1,
      maximum: 64,
      default: 2,
      description:
        'single-object writes (PUT, PATCH) in transactions at once; writes arriving meanwhile are committed together, as one group each (docs/adr/0015). About the number of cores PostgreSQL can give to data',
    }),
    WRITE_GROUP_MAX: Type.Integer({
      minimum: 1,
      maximum: 1000,
      default: 64,
      description: 'single-object writes in one group transaction at most (1: no grouping)',
    }),
    REPLICA_CUT_MS: Type.Integer({
      minimum: 10,
      maximum: 60_000,
      default: 200,
      description:
        'with DATABASE_REPLICA_URLS: how often each instance cuts a commit point for the replicas while writes go on; lists and queries without a consistency token read a replica at the newest one it has, at most this much older than its replay (docs/adr/0083)',
    }),
    QUERY_SCAN_LIMIT: Type.Integer({
      minimum: 1,
      default: 10_000,
      description:
        'objects a query or aggregation may read when no index narrows its where-clause; above it the answer is a 422 naming the property to index, unless the request sets allowScan (docs/adr/0048)',
    }),
    QUERY_TOKEN_SECRET: Type.Optional(
      Type.String({
        minLength: 32,
        description:
          'the key page tokens of object-set queries are signed with (HMAC-SHA256); every instance of data needs the same one. Unset: a random key per process, so tokens do not survive a restart (docs/adr/0047)',
      }),
    ),
    QUERY_TOKEN_TTL_SECONDS: Type.Integer({
      minimum: 1,
      maximum: 7 * 86_400,
      default: 3600,
      description:
        'how long a page token of an object-set query reads its commit (410 after); history retention keeps that commit as long (docs/adr/0072)',
    }),
    RETENTION_PRUNE_INTERVAL_MS: Type.Integer({
      minimum: 1000,
      default: 600_000,
      description:
        'how often each world with a retention policy moves its horizon and prunes the history no kept ref reads (docs/adr/0072)',
    }),
    RETENTION_PRUNE_BATCH: Type.Integer({
      minimum: 1,
      maximum: 100_000,
      default: 1000,
      description: 'history rows the pruner looks at per batch: one short transaction each, one after another',
    }),
    RETENTION_PRUNE_GRACE_MS: Type.Integer({
      minimum: 0,
      default: 30_000,
      description:
        'a new horizon is in force (reads below it answer 410) this long before the rows below it are pruned: reads that began before it finish first',
    }),
    LIVE_REPLAY_EVENTS: Type.Integer({
      minimum: 100,
      maximum: 10_000_000,
      default: 200_000,
      description: 'events of the live topics each instance keeps so that SSE subscribers can resume (docs/adr/0059)',
    }),
    LIVE_REPLAY_BYTES: Type.Integer({
      minimum: 1024 * 1024,
      maximum: 64 * 1024 * 1024 * 1024,
      default: 32 * 1024 * 1024,
      description:
        'and taking at most this many bytes (each event: its value, headers and CloudEvent, and ~0.7 KB of bookkeeping), oldest evicted first (docs/adr/0059)',
    }),
    LIVE_REPLAY_SECONDS: Type.Integer({
      minimum: 1,
      maximum: 7 * 86_400,
      default: 3600,
      description: 'and at most this old: an SSE position older than what is kept answers 410',
    }),
    LIVE_BUFFER_EVENTS: Type.Integer({
      minimum: 1,
      maximum: 10_000_000,
      default: 10_000,
      description:
        'events an SSE client whose connection does not drain may fall behind before it gets `overflow` and is closed',
    }),
    LIVE_HEARTBEAT_MS: Type.Integer({
      minimum: 100,
      default: 15_000,
      description: 'SSE comment lines every this often',
    }),
    LIVE_AUTH_CHECK_MS: Type.Integer({
      minimum: 50,
      default: 500,
      description:
        "how often each SSE stream's token and role are checked again (closed when expired, revoked or lost)",
    }),
    WEBHOOK_RETRY_HOURS: Type.Number({
      exclusiveMinimum: 0,
      default: 24,
      description:
        'how long a webhook delivery is retried (exponential backoff with jitter) before it is dead-lettered',
    }),
    WEBHOOK_DISABLE_AFTER_HOURS: Type.Number({
      exclusiveMinimum: 0,
      default: 72,
      description: 'a webhook whose every attempt failed for this long is made inactive (docs/adr/0060)',
    }),
    WEBHOOK_RETRY_BASE_MS: Type.Integer({
      minimum: 1,
      default: 5000,
      description: 'first retry delay of a webhook delivery',
    }),
    WEBHOOK_RETRY_MAX_MS: Type.Integer({ minimum: 1, default: 3_600_000, description: 'longest retry delay' }),
    WEBHOOK_TIMEOUT_MS: Type.Integer({
      minimum: 100,
      maximum: 60_000,
      default: 10_000,
      description: 'a delivery attempt gives up after this',
    }),
    WEBHOOK_CONCURRENCY: Type.Integer({
      minimum: 1,
      maximum: 1000,
      default: 32,
      description: 'deliveries in flight per instance',
    }),
    WEBHOOK_LOG_RETENTION_HOURS: Type.Number({
      exclusiveMinimum: 0,
      default: 168,
      description: 'delivered deliveries and their attempts are kept this long for …/deliveries',
    }),
    ONTO_WEBHOOK_ALLOW_HOSTS: Type.String({
      default: '',
      description:
        'comma-separated host names or addresses that webhooks may reach although loopback, private, link-local or metadata (e.g. 127.0.0.1 in tests)',
    }),
    CDC_MAPPINGS: Type.String({
      default: '[]',
      description:
        'JSON array of CDC mappings [{source, world, objectType, primaryKey, properties: {property: column}}]; data consumes cdc.raw.<source> for each',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
