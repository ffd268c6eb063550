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
    CDC_MAPPINGS: Type.String({
      default: '[]',
      description:
        'JSON array of CDC mappings [{source, world, objectType, primaryKey, properties: {property: column}}]; data consumes cdc.raw.<source> for each',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
