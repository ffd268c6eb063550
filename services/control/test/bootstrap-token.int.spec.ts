import { buildTestService } from '@onto/shared/testing';
import { describe, expect, it } from 'vitest';
import * as control from '../src/app.js';
import { ConfigSchema } from '../src/config.js';

const service = { schema: ConfigSchema, app: control.default, migrations: control.migrations } as never;

describe('the bootstrap token at boot', () => {
  it('control does not start with a published or guessable token, and says how to make one', async () => {
    for (const token of ['change-me-to-a-long-random-token', '0123456789'.repeat(4)]) {
      await expect(buildTestService(service, { ONTO_BOOTSTRAP_TOKEN: token })).rejects.toThrow(
        /^ONTO_BOOTSTRAP_TOKEN .*; make one with: openssl rand -hex 32$/,
      );
    }
    await expect(buildTestService(service, { ONTO_BOOTSTRAP_TOKEN: 'too-short' })).rejects.toThrow(
      /ONTO_BOOTSTRAP_TOKEN.*32/,
    );
  });
});
