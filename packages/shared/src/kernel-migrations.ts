import { fileURLToPath } from 'node:url';
import type { MigrationTrack } from './db/migrate.js';

/** The messaging kernel's own tables (outbox, inbox), applied to every service's database. */
export const kernelMigrations: MigrationTrack = {
  // Resolves to packages/shared/migrations from both src/ and dist/.
  directory: fileURLToPath(new URL('../migrations', import.meta.url)),
  table: 'onto_kernel_migrations',
};

/**
 * The identity replica's tables (keys, revocations, control's watermark), for the services that
 * verify tokens against a replica: data and intelligence. One track, so the tables are written once.
 */
export const identityReplicaMigrations: MigrationTrack = {
  directory: fileURLToPath(new URL('../migrations-identity-replica', import.meta.url)),
  table: 'onto_identity_replica_migrations',
};
