import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { payloadFault } from '../src/events/contract.js';
import { consistencyToken } from '../src/http/consistency.js';
import { requestHeader } from '../src/http/headers.js';
import { canonicalJson } from '../src/json/canonical.js';
import { ownValue, setOwn } from '../src/ontology/own.js';

// Names that Object.prototype answers for: input may use any of them (issue 19).
const PROTOTYPE_NAMES = ['constructor', 'toString', 'valueOf', 'hasOwnProperty', '__proto__'];
const request = (headers: Record<string, string>) => ({ headers }) as unknown as FastifyRequest;

describe('own keys', () => {
  it('ownValue finds only what the object has itself', () => {
    const record: Record<string, number> = { amount: 1, toString: 2 };
    expect(ownValue(record, 'amount')).toBe(1);
    expect(ownValue(record, 'toString')).toBe(2);
    for (const name of PROTOTYPE_NAMES.filter((n) => n !== 'toString')) expect(ownValue(record, name)).toBeUndefined();
  });

  it('setOwn writes every name as data, __proto__ included, and leaves the prototype alone', () => {
    const out: Record<string, unknown> = {};
    for (const name of PROTOTYPE_NAMES) setOwn(out, name, { name });
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.keys(out)).toEqual(PROTOTYPE_NAMES);
    expect(JSON.parse(canonicalJson(out))).toEqual(JSON.parse(JSON.stringify(out)));
    expect(ownValue(out, '__proto__')).toEqual({ name: '__proto__' });
  });

  it('a request header or consistency token named like a prototype member is absent or data', () => {
    for (const name of PROTOTYPE_NAMES) expect(requestHeader(request({}), name)).toBeUndefined();
    const token = consistencyToken(request({ 'x-consistency-token': 'constructor=4' }));
    expect(token.constructor).toBe(4);
    expect(consistencyToken(request({ 'x-consistency-token': 'data=3' })).constructor).toBeUndefined();
  });

  it('an event type named like a prototype member has no schema', () => {
    for (const name of PROTOTYPE_NAMES) {
      expect(payloadFault(name, {})).toEqual({ path: '/type', reason: `no schema for event type "${name}"` });
    }
  });
});
