import { createHmac, randomBytes } from 'node:crypto';

/** A new signing secret in the Standard Webhooks form: `whsec_` and base64 of 32 random bytes. */
export const newSecret = () => `whsec_${randomBytes(32).toString('base64')}`;

/**
 * `webhook-signature` per the Standard Webhooks specification: `v1,` and base64 of
 * HMAC-SHA256(key = the secret's bytes, `<id>.<timestamp>.<body>`), one per secret, space-separated
 * (two while a rotation overlaps).
 */
export function signature(secrets: readonly string[], id: string, timestamp: number, body: string): string {
  return secrets
    .map((secret) => {
      const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
      return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
    })
    .join(' ');
}
