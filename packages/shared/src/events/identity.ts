import { Type } from '@sinclair/typebox';
import { PublicSigningKeySchema, WorldRoleSchema } from '../auth/tokens.js';

/**
 * The payloads of onto.identity, produced by control and replicated by data and intelligence.
 * Unknown fields are allowed, so that control can add some before every consumer reads them.
 */
export const TokenRevokedPayload = Type.Object({
  userId: Type.String({ minLength: 1 }),
  /** Every access token exchanged from this API token is revoked. */
  apiTokenId: Type.Optional(Type.String({ minLength: 1 })),
  /** This one access token is revoked. */
  accessTokenId: Type.Optional(Type.String({ minLength: 1 })),
  /** When the access token expires anyway (ms since the epoch): the revocation may be forgotten then. */
  expiresAt: Type.Optional(Type.Integer()),
});

export const RolesChangedPayload = Type.Object({
  userId: Type.String({ minLength: 1 }),
  worldId: Type.String({ minLength: 1 }),
  role: Type.Union([WorldRoleSchema, Type.Null()]),
  previousRole: Type.Union([WorldRoleSchema, Type.Null()]),
  /** Access tokens of this user with a lower generation (`gen` claim) are revoked. */
  minGeneration: Type.Integer({ minimum: 0 }),
});

/** Ed25519 by control's identity key over the canonical JSON of the rest of the payload, base64url (ADR 35). */
const IdentitySignature = Type.Optional(Type.String({ minLength: 1, maxLength: 256 }));

export const KeysPublishedPayload = Type.Object({
  keys: Type.Array(PublicSigningKeySchema),
  signature: IdentitySignature,
});

export const HeartbeatPayload = Type.Object({
  /** Every identity event committed before this instant (ms since the epoch) precedes this heartbeat. */
  watermark: Type.Integer({ minimum: 0 }),
  /** The public keys tokens may be signed with, so a replica learns them even past retention. */
  keys: Type.Array(PublicSigningKeySchema),
  signature: IdentitySignature,
});
