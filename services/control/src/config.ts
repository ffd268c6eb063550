import { serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The control service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4001),
  Type.Object({
    ONTO_BOOTSTRAP_TOKEN: Type.Optional(
      Type.String({ minLength: 16, description: "The first administrator's API token on a fresh stack" }),
    ),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
