import { readReplicaConfigSchema, replicaConfigSchema, serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The intelligence service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4003),
  replicaConfigSchema(),
  readReplicaConfigSchema(),
  Type.Object({
    IDEMPOTENCY_KEY_TTL_MS: Type.Integer({
      minimum: 1000,
      maximum: 30 * 24 * 3600_000,
      default: 7 * 24 * 3600_000,
      description: 'How long an Idempotency-Key of an action is remembered (then pruned, and usable again)',
    }),
    IDEMPOTENCY_LOCK_MS: Type.Integer({
      minimum: 1000,
      maximum: 600_000,
      default: 60_000,
      description: 'How long the Redis lock of an action request in flight lives if its holder dies',
    }),
    IDEMPOTENCY_PRUNE_INTERVAL_MS: Type.Integer({
      minimum: 100,
      maximum: 24 * 3600_000,
      default: 3600_000,
      description: 'How often expired idempotency keys are deleted',
    }),
    MAX_DEFINITIONS_PER_WORLD: Type.Integer({
      minimum: 1,
      maximum: 100_000,
      default: 200,
      description: 'Derived properties, rules and decision definitions a world may have, each (more is a 422)',
    }),
    RETENTION_PRUNE_BATCH: Type.Integer({
      minimum: 1,
      maximum: 100_000,
      default: 1000,
      description:
        "versioned read-model rows the pruner looks at per batch once data moved a world's retained horizon (docs/adr/0073)",
    }),
    RETENTION_PRUNE_GRACE_MS: Type.Integer({
      minimum: 0,
      default: 30_000,
      description:
        'a new horizon answers 410 this long before the rows below it are pruned: reads that began before it finish first',
    }),
    SERIES_KEEP_MARGIN_MS: Type.Integer({
      minimum: 0,
      maximum: 366 * 24 * 3600_000,
      default: 24 * 3600_000,
      description:
        "How much further back than the widest window of the world's definitions over a series its points are kept (docs/adr/0028)",
    }),
    QUERY_SCAN_LIMIT: Type.Integer({
      minimum: 1,
      default: 10_000,
      description:
        'objects a query or aggregation of the read model may read when no condition on the primary key narrows it; above it the answer is a 422, unless the request sets allowScan (docs/adr/0075)',
    }),
    QUERY_TOKEN_SECRET: Type.Optional(
      Type.String({
        minLength: 32,
        description:
          "the key page tokens of the read model's object-set queries are signed with (HMAC-SHA256); every instance of intelligence needs the same one. Unset: a random key per process (docs/adr/0075)",
      }),
    ),
    ACTION_STEP_RETRY_MS: Type.Integer({
      minimum: 100,
      maximum: 3600_000,
      default: 60_000,
      description: 'A step of an action without a reply for this long is asked for again (data applies a step once)',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
