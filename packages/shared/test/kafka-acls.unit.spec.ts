import { describe, expect, it } from 'vitest';
import { kafkaAclsCommands, producedTopics, serviceAcls } from '../src/events/acls.js';
import { TOPIC_CONSUMERS } from '../src/events/contract.js';
import { PRODUCERS } from '../src/events/envelope.js';
import { TOPIC_NAMES, TOPICS } from '../src/kafka/topics.js';

describe('ACLs generated from the topic catalogue', () => {
  const rules = serviceAcls();
  const allowed = (user: string, operation: string, type: string, name: string) =>
    rules.some(
      (r) =>
        r.principal === `User:${user}` &&
        r.operation === operation &&
        r.resourceType === type &&
        r.name === name &&
        r.patternType === 'Literal',
    );

  it('lets each topic be written by its owner, data answer the action saga, and every service audit', () => {
    for (const topic of TOPIC_NAMES) {
      const writers = PRODUCERS.filter((s) => allowed(s, 'Write', 'Topic', topic));
      const expected =
        topic === 'domain.actions'
          ? ['data', 'intelligence']
          : topic === 'onto.audit'
            ? [...PRODUCERS]
            : [TOPICS[topic].producer];
      expect(writers, topic).toEqual(expected);
    }
    expect(producedTopics('control')).toEqual(['onto.schema', 'onto.worlds', 'onto.identity', 'onto.audit']);
    // Only control reads the audit trail (docs/adr/0084).
    expect(PRODUCERS.filter((s) => allowed(s, 'Read', 'Topic', 'onto.audit'))).toEqual(['control']);
  });

  const LIVE_READS: string[] = [
    'onto.changes.objects',
    'onto.changes.links',
    'onto.series.points',
    'domain.alerts',
    'domain.decisions',
    'domain.actions',
  ];
  it('lets each consumer group read its topics, and only its own service join it', () => {
    for (const topic of TOPIC_NAMES) {
      const readers = PRODUCERS.filter((s) => allowed(s, 'Read', 'Topic', topic));
      // data also reads the six topics live streams and webhooks follow (docs/adr/0059, 0060).
      const live = LIVE_READS.includes(topic) ? ['data'] : [];
      expect(readers, topic).toEqual(
        PRODUCERS.filter((s) => TOPIC_CONSUMERS[topic].some((c) => c.service === s) || live.includes(s)),
      );
      for (const { service, group } of TOPIC_CONSUMERS[topic]) {
        expect(allowed(service, 'Read', 'Group', group), group).toBe(true);
        expect(allowed(service, 'Write', 'Topic', `${topic}.dlq`), `${service} dead-letters ${topic}`).toBe(true);
        for (const other of PRODUCERS.filter((s) => s !== service)) {
          expect(allowed(other, 'Read', 'Group', group), `${other} in ${group}`).toBe(false);
        }
      }
    }
  });

  it('grants nothing but reading and writing topics, reading their configs and reading groups, literally, without duplicates', () => {
    expect(new Set(rules.map((r) => `${r.operation} ${r.resourceType} ${r.patternType}`))).toEqual(
      // Read Group Prefixed: data's live readers, a group per instance under data-live- (docs/adr/0059).
      new Set([
        'Write Topic Literal',
        'Read Topic Literal',
        'DescribeConfigs Topic Literal',
        'Read Group Literal',
        'Read Group Prefixed',
      ]),
    );
    expect(new Set(rules.map((r) => JSON.stringify(r))).size).toBe(rules.length);
    // No one writes identity but control: a forged signing key or heartbeat is refused by the broker.
    expect(rules.filter((r) => r.name === 'onto.identity' && r.operation === 'Write').map((r) => r.principal)).toEqual([
      'User:control',
    ]);
  });

  it('names topics and groups with the prefix, and reads CDC sources by prefix', () => {
    const prefixed = serviceAcls({ prefix: 't1.', cdcSources: ['erp'], userOf: (s) => `onto-${s}` });
    expect(prefixed.every((r) => r.name.startsWith('t1.'))).toBe(true);
    expect(prefixed).toContainEqual({
      principal: 'User:onto-data',
      resourceType: 'Topic',
      patternType: 'Prefixed',
      name: 't1.cdc.raw.',
      operation: 'Read',
    });
    expect(prefixed).toContainEqual(
      expect.objectContaining({ principal: 'User:onto-data', name: 't1.cdc.raw.erp.dlq', operation: 'Write' }),
    );
    expect(prefixed).toContainEqual(expect.objectContaining({ resourceType: 'Group', name: 't1.data-cdc' }));
  });

  it('prints kafka-acls.sh arguments', () => {
    expect(kafkaAclsCommands(rules.slice(0, 1))).toEqual([
      [
        '--add',
        '--allow-principal',
        'User:control',
        '--operation',
        'Write',
        '--topic',
        'onto.schema',
        '--resource-pattern-type',
        'literal',
      ],
    ]);
  });
});
