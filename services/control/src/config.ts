import { serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The control service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4001),
  Type.Object({
    ONTO_BOOTSTRAP_TOKEN: Type.Optional(
      Type.String({ minLength: 16, description: "The first administrator's API token on a fresh stack" }),
    ),
    ACCESS_TOKEN_TTL_SECONDS: Type.Integer({
      minimum: 1,
      maximum: 86_400,
      default: 900,
      description: 'How long an access token exchanged for an API token is valid',
    }),
    WORLD_PROVISION_TIMEOUT_MS: Type.Integer({
      minimum: 500,
      maximum: 3_600_000,
      default: 30_000,
      description: 'How long data and intelligence have to provision a new world before it is FAILED',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
