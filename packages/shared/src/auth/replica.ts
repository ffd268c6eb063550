import type { KeyObject } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { CryptoKey } from 'jose';
import type pg from 'pg';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { Unauthorized, Unavailable } from '../errors/problem.js';
import { type EventEnvelope, parseEvent } from '../events/envelope.js';
import { everyInProcess, type InProcessTask } from '../in-process.js';
import type { ApplyEffects, InboxConsumer } from '../inbox/consumer.js';
import type { ConsumerStatus, ServiceConsumerOptions } from '../inbox/plugin.js';
import type { IncomingMessage } from '../kafka/broker.js';
import { CheckFailed } from '../readiness.js';
import { HEARTBEAT_KEY, identityPayload } from './events.js';
import { identityPayloadSigned, parseIdentityPublicKey } from './identity-signature.js';
import { authPlugin, type RevocationView } from './plugin.js';
import {
  type AccessTokenClaims,
  importVerificationKey,
  type KeyRing,
  type PublicSigningKey,
  principalOfClaims,
} from './tokens.js';
import type { Principal } from './types.js';

export interface IdentityReplicaOptions {
  pool: pg.Pool;
  /** Past this lag behind control's watermark, requests are refused with 503. */
  maxLagMs: number;
  /** How often the in-memory view is reloaded from the database (other instances' consumers). */
  pollIntervalMs?: number;
  logger: Logger;
  registry?: Registry;
  /** How the replica's consumer (see consumerOptions) fares, for `describe`. */
  consumerStatus?: () => ConsumerStatus | undefined;
  /** control's identity key: keys and heartbeats not signed by it are refused. */
  identityPublicKey: KeyObject;
  /** The identity key control is being moved to (a rotation, ADR 35): what it signs is accepted too. */
  nextIdentityPublicKey?: KeyObject;
  /** A heartbeat whose watermark is further ahead of this clock is refused. */
  maxClockAheadMs?: number;
}

/** Why a key or heartbeat on onto.identity was refused, the label of onto_identity_refused_total. */
export type IdentityRefusal = 'signature' | 'future_watermark';

/** The identity consumer's session timeout: how long a crashed member keeps the partition. */
const IDENTITY_SESSION_TIMEOUT_MS = 10_000;

interface Snapshot {
  watermark_ms: number | null;
  revision: number;
  keys: PublicSigningKey[];
  revocations: { kind: 'api_token' | 'access_token'; tokenId: string; expiresAt: number | null }[];
  generations: { userId: string; minGeneration: number }[];
}

/**
 * data's and intelligence's view of identity: the signing keys and revocations control published
 * on onto.identity, kept in the service's database (tables of its migration 001) and in memory,
 * and the watermark of control's latest heartbeat. Revocations go through the inbox; heartbeats
 * do not (they are idempotent, and two a second would flood it): they only raise the watermark,
 * once every event before them in the partition has been applied. A request is refused with 503
 * when the watermark is older than the bound, so a revoked token is never accepted past it.
 */
export class IdentityReplica implements KeyRing, RevocationView {
  private watermark: number | undefined;
  private revision = 0;
  private readonly keys = new Map<string, CryptoKey>();
  /** Retired keys (ADR 42): when tokens they signed stop verifying here, ms since the epoch. */
  private readonly refusedAfter = new Map<string, number>();
  private readonly revokedApiTokens = new Set<string>();
  private readonly revokedAccessTokens = new Map<string, number>();
  private readonly minGenerations = new Map<string, number>();
  private loading: Promise<void> | undefined;
  private reloadAgain = false;
  private timer: InProcessTask | undefined;
  private stopped = false;
  private loads = 0;
  private readonly log: Logger;
  private readonly refused: Counter<'reason'> | undefined;

  constructor(private readonly opts: IdentityReplicaOptions) {
    this.log = opts.logger.child({ component: 'identity-replica' });
    if (opts.registry) {
      this.refused =
        (opts.registry.getSingleMetric('onto_identity_refused_total') as Counter<'reason'> | undefined) ??
        new Counter({
          name: 'onto_identity_refused_total',
          help: 'Signing keys and heartbeats on onto.identity refused: not signed by the identity key, or a watermark from the future',
          labelNames: ['reason'],
          registers: [opts.registry],
        });
    }
    if (opts.registry && !opts.registry.getSingleMetric('onto_identity_replica_lag_seconds')) {
      const replica = this;
      new Gauge({
        name: 'onto_identity_replica_lag_seconds',
        help: "How far this service's revocation replica is behind control (-1 before the first heartbeat)",
        registers: [opts.registry],
        collect() {
          const lag = replica.lagMs();
          this.set(lag === undefined ? -1 : lag / 1000);
        },
      });
    }
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.reload().catch((err) => this.log.warn({ err }, 'could not load the identity replica'));
    // The replica is this process's memory of control's keys and revocations: each instance polls
    // its own tables, a per-process timer rather than a job (docs/adr/0051).
    this.timer = everyInProcess('polling the identity replica', this.opts.pollIntervalMs ?? 200, () => this.kick());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.stop();
    await this.loading;
  }

  /**
   * The inbox consumer of onto.identity that keeps the replica's tables, for `addConsumer`: named
   * `name` (before the service's prefix).
   */
  consumerOptions(name: string): ServiceConsumerOptions {
    return {
      name,
      topics: ['onto.identity'],
      apply: this.apply,
      passThrough: {
        take: asHeartbeat,
        afterBatch: async (beats) => {
          if (beats.length === 0) return this.kick();
          try {
            await this.onHeartbeats(beats);
          } catch (err) {
            // The watermark stays where it was: requests fail closed until the next heartbeat lands.
            this.log.warn({ err }, 'could not record a heartbeat');
          }
        },
      },
      // A revocation is never skipped: one that cannot be applied holds the partition, the
      // watermark stops, and requests fail closed until it applies.
      maxAttempts: Number.POSITIVE_INFINITY,
      partitionsConsumedConcurrently: 1,
      // While a crashed instance's member still holds the partition, no instance of the service
      // applies heartbeats and every request fails closed: let the broker give the partition up
      // after 10 s of silence, not kafkajs's default 30 s.
      sessionTimeoutMs: IDENTITY_SESSION_TIMEOUT_MS,
    };
  }

  /** What this replica knows and how its consumer fares: for diagnostics, not for decisions. */
  describe(): Record<string, unknown> {
    const consumer = this.opts.consumerStatus?.();
    return {
      keys: [...this.keys.keys()],
      lagMs: this.lagMs() ?? null,
      revision: this.revision,
      consumerRunning: consumer?.running ?? false,
      startAttempts: consumer?.startAttempts ?? 0,
      lastStartError: consumer?.lastStartError ?? null,
    };
  }

  /** Milliseconds between now and the latest watermark this instance has loaded. */
  lagMs(): number | undefined {
    return this.watermark === undefined ? undefined : Date.now() - this.watermark;
  }

  async key(kid: string, issuedAtSeconds: number): Promise<CryptoKey | undefined> {
    const known = this.keys.get(kid);
    if (known) {
      const refusedAfter = this.refusedAfter.get(kid);
      if (refusedAfter !== undefined && refusedAfter <= Date.now()) {
        throw new Unauthorized('the access token is signed by a retired key');
      }
      return known;
    }
    // Control publishes a key before it signs with it: once the watermark is past the token's
    // issue time, a key still unknown is not control's.
    if (this.watermark !== undefined && this.watermark >= (issuedAtSeconds + 1) * 1000) return undefined;
    throw new Unavailable('the key that signed this access token is not known here yet; retry shortly', 1);
  }

  async principal(claims: AccessTokenClaims): Promise<Principal | null> {
    const lag = this.lagMs();
    if (lag === undefined) throw new Unavailable('this service has not heard from control yet; retry shortly', 1);
    if (lag > this.opts.maxLagMs) {
      throw new Unavailable(
        `this service's view of revocations is ${lag} ms behind control (bound ${this.opts.maxLagMs} ms); retry shortly`,
        Math.max(1, Math.ceil(this.opts.maxLagMs / 1000)),
      );
    }
    if (this.revokedApiTokens.has(claims.ati) || this.revokedAccessTokens.has(claims.jti)) return null;
    if (claims.gen < (this.minGenerations.get(claims.sub) ?? 0)) return null;
    return principalOfClaims(claims);
  }

  /** Reloads what changed in the database since the last load; concurrent calls share one run. */
  kick(): void {
    if (this.loading) {
      this.reloadAgain = true;
      return;
    }
    this.loading = this.reload()
      .catch((err) => this.log.warn({ err }, 'could not reload the identity replica'))
      .finally(() => {
        this.loading = undefined;
        if (this.reloadAgain && !this.stopped) {
          this.reloadAgain = false;
          this.kick();
        }
      });
  }

  /** Waits for a reload that includes everything committed so far. */
  async refresh(): Promise<void> {
    await this.loading;
    await this.reload();
  }

  private async reload(): Promise<void> {
    // One statement, one snapshot: a watermark is never loaded without the revocations before it.
    // Writers bump identity_replica.revision under its row lock, so revisions commit in order.
    const { rows } = await this.opts.pool.query<Snapshot & Record<string, unknown>>(
      `SELECT r.watermark_ms, r.revision,
         (SELECT coalesce(json_agg(k.jwk ORDER BY k.revision), '[]') FROM identity_keys k WHERE k.revision > $1) AS keys,
         (SELECT coalesce(json_agg(json_build_object('kind', v.kind, 'tokenId', v.token_id,
                   'expiresAt', floor(extract(epoch FROM v.expires_at) * 1000)::int8)), '[]')
            FROM identity_revocations v WHERE v.revision > $1) AS revocations,
         (SELECT coalesce(json_agg(json_build_object('userId', g.user_id, 'minGeneration', g.min_generation)), '[]')
            FROM identity_user_generations g WHERE g.revision > $1) AS generations
       FROM identity_replica r`,
      [this.revision],
    );
    const snapshot = rows[0];
    if (!snapshot) throw new Error('identity_replica has no row: is migration 001.do.identity-replica applied?');
    const imported = await Promise.all(
      snapshot.keys.map(async (jwk) => [jwk, this.keys.get(jwk.kid) ?? (await importVerificationKey(jwk))] as const),
    );
    // From here on nothing awaits: a request sees the whole snapshot or none of it.
    for (const [jwk, key] of imported) {
      this.keys.set(jwk.kid, key);
      if (jwk.refusedAfter !== undefined) this.refusedAfter.set(jwk.kid, jwk.refusedAfter);
    }
    const now = Date.now();
    for (const r of snapshot.revocations) {
      if (r.kind === 'api_token') this.revokedApiTokens.add(r.tokenId);
      else if (r.expiresAt === null || r.expiresAt > now) this.revokedAccessTokens.set(r.tokenId, r.expiresAt ?? 0);
    }
    for (const g of snapshot.generations) {
      this.minGenerations.set(g.userId, Math.max(g.minGeneration, this.minGenerations.get(g.userId) ?? 0));
    }
    this.revision = Math.max(this.revision, snapshot.revision);
    if (snapshot.watermark_ms !== null) this.watermark = Math.max(snapshot.watermark_ms, this.watermark ?? 0);
    if (++this.loads % 1000 === 0) {
      for (const [jti, expiresAt] of this.revokedAccessTokens) {
        if (expiresAt !== 0 && expiresAt <= now) this.revokedAccessTokens.delete(jti);
      }
    }
  }

  /** Applies revocations, role changes and keys inside the inbox transaction. */
  private readonly apply: ApplyEffects = async (tx, events) => {
    const { rows } = await tx.query<{ revision: number }>(
      'UPDATE identity_replica SET revision = revision + 1 RETURNING revision',
    );
    const revision = rows[0]?.revision;
    if (revision === undefined) throw new Error('identity_replica has no row');
    for (const { event } of events) {
      switch (event.type) {
        case 'identity.token.revoked': {
          const p = identityPayload('identity.token.revoked', event);
          const expires = p.expiresAt === undefined ? null : new Date(p.expiresAt).toISOString();
          for (const [kind, id] of [
            ['api_token', p.apiTokenId],
            ['access_token', p.accessTokenId],
          ] as const) {
            if (id === undefined) continue;
            await tx.query(
              `INSERT INTO identity_revocations (kind, token_id, user_id, expires_at, revision)
               VALUES ($1, $2, $3, $4, $5) ON CONFLICT (kind, token_id) DO NOTHING`,
              [kind, id, p.userId, kind === 'access_token' ? expires : null, revision],
            );
          }
          break;
        }
        case 'identity.roles.changed': {
          const p = identityPayload('identity.roles.changed', event);
          await tx.query(
            `INSERT INTO identity_user_generations AS g (user_id, min_generation, revision) VALUES ($1, $2, $3)
             ON CONFLICT (user_id) DO UPDATE SET min_generation = EXCLUDED.min_generation, revision = EXCLUDED.revision
              WHERE g.min_generation < EXCLUDED.min_generation`,
            [p.userId, p.minGeneration, revision],
          );
          break;
        }
        case 'identity.keys.published': {
          const p = identityPayload('identity.keys.published', event);
          // Recorded in the inbox without effect: a forged key never verifies a token here.
          if (!this.accepts(p, event.event_id)) break;
          await insertKeys(tx, p.keys, revision);
          break;
        }
        default:
          break; // an identity event this version does not know: recorded in the inbox, no effect
      }
    }
  };

  /** Whether a key set or heartbeat is signed by control's identity key; counts it when not. */
  private accepts(payload: Record<string, unknown>, eventId: string): boolean {
    if (identityPayloadSigned(this.opts.identityPublicKey, payload)) return true;
    const next = this.opts.nextIdentityPublicKey;
    if (next && identityPayloadSigned(next, payload)) return true;
    this.refuse('signature', eventId, {});
    return false;
  }

  private refuse(reason: IdentityRefusal, eventId: string, details: Record<string, unknown>) {
    this.refused?.inc({ reason });
    this.log.warn({ eventId, reason, ...details }, 'identity event refused');
  }

  /** Raises the watermark to the newest heartbeat's; learns any key it names that is new here. */
  private async onHeartbeats(beats: EventEnvelope[]): Promise<void> {
    let watermark = -1;
    let keys: PublicSigningKey[] = [];
    for (const beat of beats) {
      try {
        const p = identityPayload('identity.heartbeat', beat);
        if (!this.accepts(p, beat.event_id)) continue;
        const aheadMs = p.watermark - Date.now();
        if (aheadMs > (this.opts.maxClockAheadMs ?? 60_000)) {
          this.refuse('future_watermark', beat.event_id, { aheadMs });
          continue;
        }
        watermark = Math.max(watermark, p.watermark);
        keys = p.keys;
      } catch (err) {
        this.log.warn({ err, eventId: beat.event_id }, 'malformed heartbeat ignored');
      }
    }
    if (watermark < 0) return;
    // Keys new here, and retirements this replica has not recorded yet.
    const unknown = keys.filter(
      (k) =>
        !this.keys.has(k.kid) ||
        (k.refusedAfter !== undefined && k.refusedAfter < (this.refusedAfter.get(k.kid) ?? Number.POSITIVE_INFINITY)),
    );
    await this.opts.pool.query(
      `WITH bump AS (
         UPDATE identity_replica
            SET watermark_ms = greatest(coalesce(watermark_ms, 0), $1::int8),
                revision = revision + CASE WHEN jsonb_array_length($2::jsonb) > 0 THEN 1 ELSE 0 END
         RETURNING revision
       )
       INSERT INTO identity_keys AS known (kid, jwk, revision)
       SELECT k->>'kid', k, bump.revision FROM bump, jsonb_array_elements($2::jsonb) AS k
       ${RETIRE_ON_CONFLICT}`,
      [watermark, JSON.stringify(unknown)],
    );
    this.kick();
  }
}

/**
 * A key already known is updated only to record its retirement, or an earlier one: a replayed
 * older key set never makes a retired key verify again.
 */
const RETIRE_ON_CONFLICT = `ON CONFLICT (kid) DO UPDATE SET jwk = EXCLUDED.jwk, revision = EXCLUDED.revision
  WHERE EXCLUDED.jwk ? 'refusedAfter' AND (NOT known.jwk ? 'refusedAfter'
    OR (EXCLUDED.jwk->>'refusedAfter')::int8 < (known.jwk->>'refusedAfter')::int8)`;

async function insertKeys(tx: pg.ClientBase, keys: PublicSigningKey[], revision: number) {
  if (keys.length === 0) return;
  await tx.query(
    `INSERT INTO identity_keys AS known (kid, jwk, revision)
     SELECT k->>'kid', k, $2 FROM jsonb_array_elements($1::jsonb) AS k
     ${RETIRE_ON_CONFLICT}`,
    [JSON.stringify(keys), revision],
  );
}

function asHeartbeat(message: IncomingMessage): EventEnvelope | undefined {
  if (message.key !== HEARTBEAT_KEY) return undefined;
  try {
    const event = parseEvent(message.value);
    return event.type === 'identity.heartbeat' ? event : undefined;
  } catch {
    return undefined; // not an event at all: the inbox dead-letters it
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** data's and intelligence's replica of identity (keys, revocations, control's watermark). */
    identityReplica: IdentityReplica;
  }
}

export interface IdentityReplicaPluginOptions {
  /** The consumer's name; the service's topic prefix is put before it. */
  consumer: string;
  maxLagMs: number;
  pollIntervalMs?: number;
  /** ONTO_IDENTITY_PUBLIC_KEY: PEM or base64. */
  identityPublicKey: string;
  /** ONTO_IDENTITY_PUBLIC_KEY_NEXT, during a rotation of the identity key. */
  nextIdentityPublicKey?: string | undefined;
  maxClockAheadMs?: number;
}

/** The auth plugin on a replica of onto.identity: for the services other than control. */
export const identityReplicaPlugin = fp(
  async (app: FastifyInstance, opts: IdentityReplicaPluginOptions) => {
    let consumer: InboxConsumer | undefined;
    const replica = new IdentityReplica({
      pool: app.pg,
      maxLagMs: opts.maxLagMs,
      ...(opts.pollIntervalMs ? { pollIntervalMs: opts.pollIntervalMs } : {}),
      logger: app.log as never,
      registry: app.metrics,
      consumerStatus: () => (consumer ? app.consumerStatus(consumer) : undefined),
      identityPublicKey: parseIdentityPublicKey(opts.identityPublicKey),
      ...(opts.nextIdentityPublicKey === undefined
        ? {}
        : { nextIdentityPublicKey: parseIdentityPublicKey(opts.nextIdentityPublicKey) }),
      ...(opts.maxClockAheadMs !== undefined ? { maxClockAheadMs: opts.maxClockAheadMs } : {}),
    });
    // Started and stopped with the service's other consumers.
    consumer = app.addConsumer(replica.consumerOptions(opts.consumer));
    app.decorate('identityReplica', replica);
    // Degraded, not unready, past the bound: every instance of the service lags alike (ADR 22).
    app.addReadinessCheck(
      'identity',
      async () => {
        const lagMs = replica.lagMs();
        const details = { lagMs: lagMs ?? null, boundMs: opts.maxLagMs };
        if (lagMs === undefined) throw new CheckFailed('no heartbeat from control yet', details);
        if (lagMs > opts.maxLagMs) {
          throw new CheckFailed(
            `revocations ${lagMs} ms behind control, past the bound; requests fail closed`,
            details,
          );
        }
        return details;
      },
      { required: false },
    );
    await app.register(authPlugin, { keys: replica, revocations: replica });
    app.addHook('onReady', () => replica.start());
    app.addHook('onClose', () => replica.stop());
  },
  { name: 'onto-identity-replica', dependencies: ['onto-postgres', 'onto-consumers', 'onto-metrics'] },
);
