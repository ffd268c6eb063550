import { serviceConfigSchema } from '@onto/shared';
import type { Static } from '@sinclair/typebox';

/** The data service's configuration: the names are environment variables. */
export const ConfigSchema = serviceConfigSchema(4002);
export type Config = Static<typeof ConfigSchema>;
