import { replicaConfigSchema, serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The data service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4002),
  replicaConfigSchema(),
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
    CDC_MAPPINGS: Type.String({
      default: '[]',
      description:
        'JSON array of CDC mappings [{source, world, objectType, primaryKey, properties: {property: column}}]; data consumes cdc.raw.<source> for each',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
