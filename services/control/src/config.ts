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
    MAX_OBJECT_TYPES_PER_WORLD: Type.Integer({
      minimum: 1,
      maximum: 100_000,
      default: 200,
      description: 'Object types one world may have (more is a 422)',
    }),
    MAX_INDEXED_PROPERTIES_PER_WORLD: Type.Integer({
      minimum: 0,
      maximum: 100_000,
      default: 64,
      description:
        'Properties marked indexed across all object types of one world (each is an index in data; more is a 422)',
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
