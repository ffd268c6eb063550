import { fileURLToPath } from 'node:url';
import type { MigrationTrack } from './db/migrate.js';

/** The messaging kernel's own tables (outbox, inbox), applied to every service's database. */
export const kernelMigrations: MigrationTrack = {
  // Resolves to packages/shared/migrations from both src/ and dist/.
  directory: fileURLToPath(new URL('../migrations', import.meta.url)),
  table: 'onto_kernel_migrations',
};
