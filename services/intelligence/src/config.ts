import { serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The intelligence service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4003),
  Type.Object({
    IDENTITY_MAX_LAG_MS: Type.Integer({
      minimum: 100,
      maximum: 600_000,
      default: 2000,
      description: 'Requests are refused (503) while the replica of revocations lags control by more than this',
    }),
    CONSISTENCY_WAIT_MS: Type.Integer({
      minimum: 0,
      maximum: 60_000,
      default: 2000,
      description:
        'How long a read whose X-Consistency-Token names a data or schema version not applied here waits before 503',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;
