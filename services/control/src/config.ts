import { serviceConfigSchema } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';

/** The control service's configuration: the names are environment variables. */
export const ConfigSchema = Type.Composite([
  serviceConfigSchema(4001),
  Type.Object({
    ONTO_IDENTITY_PRIVATE_KEY: Type.String({
      minLength: 1,
      description:
        'Required. The private half of the identity key (Ed25519, PEM or base64 of PEM/DER) that signs signing keys and heartbeats on onto.identity; data and intelligence hold the public half (ADR 35)',
    }),
    ONTO_KEY_ENCRYPTION_KEY: Type.String({
      minLength: 1,
      description:
        "Required. 32 random bytes, base64 (openssl rand -base64 32) or hex, that seal the token-signing keys' private halves in control's database (AES-256-GCM, ADR 42); control refuses to boot when it does not open the stored keys",
    }),
    ONTO_KEY_ENCRYPTION_KEY_PREVIOUS: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          'While rotating the key-encryption key: the one being replaced. At boot control opens the signing keys it sealed and seals them again under ONTO_KEY_ENCRYPTION_KEY; remove it once every replica runs with the new key (ADR 42)',
      }),
    ),
    SIGNING_KEY_MAX_AGE_SECONDS: Type.Integer({
      minimum: 0,
      maximum: 31_536_000,
      default: 2_592_000,
      description:
        'The token-signing key is rotated once it is this old (checked every SIGNING_KEY_CHECK_INTERVAL_MS, one replica at a time); 0 rotates only on POST /v1/admin/signing-keys/rotate',
    }),
    SIGNING_KEY_GRACE_SECONDS: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 604_800,
        description:
          'How long tokens signed by a retired key still verify, in control and in every replica; default ACCESS_TOKEN_TTL_SECONDS (no token outlives its key)',
      }),
    ),
    SIGNING_KEY_ANNOUNCE_MS: Type.Integer({
      minimum: 0,
      maximum: 3_600_000,
      default: 5000,
      description:
        'How long a new token-signing key is announced to data and intelligence before control signs with it (a rotation with a grace of 0 signs at once): longer than the lag their identity replicas normally run at, so that no token reaches a replica before its key (ADR 42)',
    }),
    SIGNING_KEY_CHECK_INTERVAL_MS: Type.Integer({
      minimum: 100,
      maximum: 86_400_000,
      default: 60_000,
      description: "How often control checks the signing key's age",
    }),
    ONTO_DATA_URL: Type.Optional(
      Type.String({
        minLength: 1,
        description: "data's public URL, which the console calls (default: the console's host, port 4002)",
      }),
    ),
    ONTO_INTELLIGENCE_URL: Type.Optional(
      Type.String({
        minLength: 1,
        description: "intelligence's public URL, which the console calls (default: the console's host, port 4003)",
      }),
    ),
    ONTO_CONSOLE_DIR: Type.Optional(
      Type.String({
        minLength: 1,
        description: "The console's build served under /console (default packages/console/dist)",
      }),
    ),
    ONTO_BOOTSTRAP_TOKEN: Type.Optional(
      Type.String({
        minLength: 32,
        description:
          "The first administrator's API token on a fresh stack: 32 or more random characters (openssl rand -hex 32)",
      }),
    ),
    ACCESS_TOKEN_TTL_SECONDS: Type.Integer({
      minimum: 1,
      maximum: 86_400,
      default: 900,
      description: 'How long an access token exchanged for an API token is valid',
    }),
    TOKEN_EXCHANGES_PER_MINUTE_PER_IP: Type.Integer({
      minimum: 1,
      maximum: 1_000_000,
      default: 60,
      description: 'POST /v1/auth/token calls one client address may make per minute (then 429 with Retry-After)',
    }),
    TOKEN_EXCHANGES_PER_MINUTE_PER_TOKEN: Type.Integer({
      minimum: 1,
      maximum: 1_000_000,
      default: 20,
      description: 'POST /v1/auth/token calls presenting one API token per minute (then 429 with Retry-After)',
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
    RETENTION_MIN_DAYS: Type.Integer({
      minimum: 0,
      maximum: 36_500,
      default: 1,
      description:
        'The fewest days a world may keep its history (PUT /v1/worlds/{world}/retention below it is a 422 naming /keepDays; docs/adr/0072)',
    }),
    RETENTION_DEFAULT_KEEP_DAYS: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 36_500,
        description:
          'The keepDays of a world created from now on (its retention policy until set); unset: new worlds keep their history forever',
      }),
    ),
    RETENTION_DEFAULT_KEEP_VERSIONS: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1_000_000,
        description: 'With RETENTION_DEFAULT_KEEP_DAYS: the keepVersions of a world created from now on',
      }),
    ),
    CONSISTENCY_HISTORY_KEEP_SECONDS: Type.Integer({
      minimum: 60,
      maximum: 2_592_000,
      default: 7200,
      description:
        'How long control keeps the version vector samples of GET /v1/worlds/{world}/consistency/history (the console charts the last hour)',
    }),
    CHECKER_INTERVAL_MS: Type.Integer({
      minimum: 0,
      maximum: 86_400_000,
      default: 300_000,
      description: 'How often the consistency checker runs (one replica at a time); 0 turns the periodic run off',
    }),
    CHECKER_REPORT_TIMEOUT_MS: Type.Integer({
      minimum: 100,
      maximum: 600_000,
      default: 30_000,
      description:
        "How long a check waits for data's and intelligence's reports (a missing one is an unreported finding)",
    }),
    CHECKER_COUNT_TOLERANCE: Type.Number({
      minimum: 0,
      maximum: 1,
      default: 0.01,
      description:
        'Object counts may differ by this share of the larger count (at least 1) while writes flow; exact once quiet',
    }),
    CHECKER_OUTBOX_MAX_AGE_SECONDS: Type.Number({
      minimum: 1,
      maximum: 86_400,
      default: 60,
      description: 'An outbox row not sent for longer than this is a finding of the checker',
    }),
    WORLD_PROVISION_TIMEOUT_MS: Type.Integer({
      minimum: 500,
      maximum: 3_600_000,
      default: 30_000,
      description: 'How long data and intelligence have to provision a new world before it is FAILED',
    }),
    MERGE_TIMEOUT_MS: Type.Integer({
      minimum: 500,
      maximum: 3_600_000,
      default: 60_000,
      description:
        'How long each phase of a merge (planning, applying, compensating) may wait for data and intelligence before the merge fails',
    }),
  }),
]);
export type Config = Static<typeof ConfigSchema>;

/** Tokens once published as examples or defaults: anyone who read the repository knows them. */
const PUBLISHED_TOKENS = new Set(['change-me-to-a-long-random-token']);

/** Shannon entropy of the token's characters, in bits per character. */
function bitsPerCharacter(token: string): number {
  const counts = new Map<string, number>();
  for (const c of token) counts.set(c, (counts.get(c) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) bits -= (n / token.length) * Math.log2(n / token.length);
  return bits;
}

/** Whether the token is a shorter string repeated (`abcabcabc…`, `0123456789` over and over). */
function repeats(token: string): boolean {
  for (let period = 1; period <= token.length / 2; period++) {
    if (token.slice(period) === token.slice(0, token.length - period)) return true;
  }
  return false;
}

/**
 * Why a bootstrap token must not be used, or undefined: shorter than 32 characters, a repeated
 * pattern, under 3 bits of entropy a character, or a published default. A heuristic against the
 * obvious, not proof of randomness; `openssl rand -hex 32` always passes.
 */
export function bootstrapTokenFault(token: string): string | undefined {
  const fault =
    token.length < 32
      ? `is ${token.length} characters long, not at least 32`
      : PUBLISHED_TOKENS.has(token)
        ? 'is a published default that anyone who read the repository knows'
        : repeats(token)
          ? 'is a short pattern repeated'
          : bitsPerCharacter(token) < 3
            ? 'is not random enough (under 3 bits of entropy a character)'
            : undefined;
  return fault && `ONTO_BOOTSTRAP_TOKEN ${fault}; make one with: openssl rand -hex 32`;
}
