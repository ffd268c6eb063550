import type { ObjectType } from '@onto/shared';
import { describe, expect, it } from 'vitest';
import { applyPatch, checkDate, checkObject, normaliseInstant, parseFilter } from '../src/objects/model.js';

const Thing: ObjectType = {
  apiName: 'Thing',
  displayName: 'Thing',
  primaryKey: 'n',
  properties: {
    n: { type: 'integer', required: true },
    size: { type: 'double', indexed: true },
    at: { type: 'timestamp', indexed: true },
    on: { type: 'date', indexed: true },
    ok: { type: 'boolean', indexed: true },
    where: { type: 'geopoint', indexed: true },
    name: { type: 'string', required: true },
  },
};

describe('object values', () => {
  it('normalises instants to UTC milliseconds and refuses what is not one', () => {
    expect(normaliseInstant('2024-05-01T12:00:00+02:00')).toEqual({ value: '2024-05-01T10:00:00.000Z' });
    expect(normaliseInstant('2024-12-31T23:30:00-01:00')).toEqual({ value: '2025-01-01T00:30:00.000Z' });
    expect(normaliseInstant('2024-02-29T00:00:00.5Z')).toEqual({ value: '2024-02-29T00:00:00.500Z' });
    expect(normaliseInstant('2024-02-29T00:00:00.123000000Z')).toEqual({ value: '2024-02-29T00:00:00.123Z' });
    expect(normaliseInstant('0099-01-01T00:00:00Z')).toEqual({ value: '0099-01-01T00:00:00.000Z' });
    for (const bad of [
      '2023-02-29T00:00:00Z',
      '2024-05-01T24:00:00Z',
      '2024-05-01T12:00:60Z',
      '2024-05-01 12:00:00Z',
      '2024-05-01T12:00:00.0001Z',
      '2024-05-01T12:00:00+24:00',
      '0000-01-01T00:00:00+01:00',
      '2024-05-01T12:00Z',
    ]) {
      expect(normaliseInstant(bad), bad).toHaveProperty('error');
    }
  });

  it('checks calendar dates', () => {
    expect(checkDate('2024-02-29')).toBeUndefined();
    expect(checkDate('2100-02-29')).toMatch(/not a valid date/);
    expect(checkDate('2024-2-1')).toMatch(/YYYY-MM-DD/);
  });

  it('fills an integer primary key from the path and checks it against the body', () => {
    expect(checkObject(Thing, { name: 'x' }, '5')).toEqual({ properties: { n: 5, name: 'x' }, errors: [] });
    expect(checkObject(Thing, { n: 5, name: 'x' }, '5').errors).toEqual([]);
    expect(checkObject(Thing, { n: 6, name: 'x' }, '5').errors).toEqual([
      { path: '/properties/n', message: 'must equal the primary key in the path, "5"' },
    ]);
    expect(checkObject(Thing, { n: '5', name: 'x' }, '5').errors[0]?.path).toBe('/properties/n');
  });

  it('drops null optional values and refuses null required ones', () => {
    expect(checkObject(Thing, { name: 'x', size: null }, '1').properties).toEqual({ n: 1, name: 'x' });
    expect(checkObject(Thing, { name: null }, '1').errors).toEqual([
      { path: '/properties/name', message: 'is required' },
    ]);
  });

  it('patches at the top level and reports a removed required property once', () => {
    const stored = { n: 1, name: 'x', size: 2 };
    expect(applyPatch(Thing, stored, { size: null, ok: true }, '1')).toEqual({
      properties: { n: 1, name: 'x', ok: true },
      errors: [],
    });
    expect(applyPatch(Thing, stored, { name: null }, '1').errors).toEqual([
      { path: '/properties/name', message: 'is required and cannot be removed' },
    ]);
  });

  it('parses filters on indexed properties into stored values', () => {
    expect(parseFilter(Thing, 'size:gte:1.5')).toEqual({ property: 'size', op: 'gte', value: 1.5, jsonType: 'number' });
    expect(parseFilter(Thing, 'at:lt:2024-05-01T12:00:00+02:00')).toMatchObject({ value: '2024-05-01T10:00:00.000Z' });
    expect(parseFilter(Thing, 'ok:eq:true')).toMatchObject({ value: true, jsonType: 'boolean' });
    expect(parseFilter(Thing, 'on:gt:2024-01-01')).toMatchObject({ value: '2024-01-01' });
    expect(parseFilter(Thing, 'name:eq:x')).toEqual({
      error: 'name is not indexed; only indexed properties can be filtered on',
    });
    expect(parseFilter(Thing, 'ok:gt:true')).toHaveProperty('error');
    expect(parseFilter(Thing, 'where:eq:1')).toHaveProperty('error');
    expect(parseFilter(Thing, 'size:eq:0x10')).toHaveProperty('error');
    expect(parseFilter(Thing, 'size')).toHaveProperty('error');
    expect(parseFilter(Thing, 'toString:eq:1')).toHaveProperty('error');
  });
});
