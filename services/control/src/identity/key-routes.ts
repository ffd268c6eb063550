import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_LIMITS, problemResponses, recordAudit } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { SigningKeys } from './keys.js';

export interface KeyRoutesOptions {
  keys: SigningKeys;
  /** A rotation's grace when the request names none. */
  defaultGraceSeconds: number;
}

const MAX_GRACE_SECONDS = 604_800;
const Timestamp = Type.Union([Type.String({ format: 'date-time' }), Type.Null()]);

/**
 * The token-signing keys for platform administrators (ADR 42): which exist, and a rotation now —
 * after a suspected leak with `graceSeconds: 0`, which refuses every token the old key signed at
 * once, everywhere.
 */
export default async function keyRoutes(fastify: FastifyInstance, opts: KeyRoutesOptions) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/admin/signing-keys',
    {
      preHandler: app.authorize({ admin: true }),
      schema: {
        tags: ['admin'],
        summary: 'The token-signing keys: the active one and the retired ones, newest first (no private halves)',
        response: {
          200: Type.Object({
            keys: Type.Array(
              Type.Object({
                kid: Type.String(),
                createdAt: Type.String({ format: 'date-time' }),
                signsFrom: Type.String({
                  format: 'date-time',
                  description: 'when the key started (or starts) signing: announced to the replicas until then',
                }),
                retiredAt: Timestamp,
                refusedAfter: Timestamp,
              }),
            ),
          }),
          ...problemResponses(401, 403, 503),
        },
      },
    },
    async () => ({ keys: await opts.keys.list() }),
  );

  app.post(
    '/v1/admin/signing-keys/rotate',
    {
      bodyLimit: BODY_LIMITS.small,
      preHandler: app.authorize({ admin: true }),
      schema: {
        tags: ['admin'],
        summary: 'Retire the active token-signing key and announce a new one, which signs once the replicas have it',
        description: `The new key is published at once and signs from signsFrom, SIGNING_KEY_ANNOUNCE_MS later, so that data and intelligence know it before any token it signs reaches them; the retired key signs until then. Its tokens still verify for graceSeconds (default SIGNING_KEY_GRACE_SECONDS) after it stopped signing, in control and in data and intelligence, then nowhere. 0 refuses them at once and the new key signs at once (a leaked key). At most ${MAX_GRACE_SECONDS}.`,
        body: Type.Object(
          { graceSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_GRACE_SECONDS })) },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Object({
            kid: Type.String({ description: 'the new key' }),
            signsFrom: Type.String({ format: 'date-time', description: 'when the new key starts signing' }),
            retiredKid: Type.Union([Type.String(), Type.Null()]),
            refusedAfter: Timestamp,
          }),
          ...problemResponses(400, 401, 403, 503),
        },
      },
    },
    async (request, reply) => {
      const graceSeconds = request.body.graceSeconds ?? opts.defaultGraceSeconds;
      const rotation = await opts.keys.rotate({
        graceSeconds,
        also: (tx, r) =>
          recordAudit(tx, request, {
            action: 'admin.signing-key.rotate',
            result: 'created',
            subject: r.kid,
            detail: { retiredKid: r.retiredKid, graceSeconds },
          }),
      });
      if (!rotation) throw new Error('an unconditional rotation rotated nothing');
      return reply.code(201).send({
        kid: rotation.kid,
        signsFrom: new Date(rotation.signsFrom).toISOString(),
        retiredKid: rotation.retiredKid,
        refusedAfter: rotation.refusedAfter === null ? null : new Date(rotation.refusedAfter).toISOString(),
      });
    },
  );
}
