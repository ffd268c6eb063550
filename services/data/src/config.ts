import { replicaConfigSchema, serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The data service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4002),
  replicaConfigSchema(),
  Type.Object({
    CDC_MAPPINGS: Type.String({
      default: '[]',
      description:
        'JSON array of CDC mappings [{source, world, objectType, primaryKey, properties: {property: column}}]; data consumes cdc.raw.<source> for each',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
