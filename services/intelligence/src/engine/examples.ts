/**
 * The examples of the read model's object-set endpoints in intelligence's OpenAPI document,
 * written for the demo world that `./onto up` creates (Customer and Order in data, the derived
 * property `totalSpent` of customers). test/readme-examples runs each request example against it.
 */
import type { Example } from '@onto/shared';

const CUSTOMER = { type: 'Customer' };

export const queryExamples: Record<string, Example> = {
  bigSpenders: {
    summary: 'Customers who spent 1,500 or more, biggest first, with their name and what they spent',
    path: CUSTOMER,
    value: {
      where: { 'derived.totalSpent': { $gte: 1500 } },
      orderBy: [{ property: 'derived.totalSpent', direction: 'desc' }],
      select: ['name', 'derived.totalSpent'],
    },
  },
  bigOrdersOfStandardCustomers: {
    summary: 'The orders of customers who are not gold, reached through the link type `orders`',
    path: CUSTOMER,
    value: { where: { tier: { $ne: 'gold' } }, pivotTo: ['orders'] },
  },
};

export const queryAnswerExamples: Record<string, Example> = {
  aPage: {
    summary: 'Each object with its derived values at the commit every page reads',
    value: {
      objects: [
        {
          type: 'Customer',
          pk: 'c-1',
          version: 1,
          properties: { name: 'Ada Lovelace' },
          derived: { totalSpent: 1630 },
        },
      ],
      nextPageToken: null,
      commit: 14,
    },
  },
};

export const aggregateExamples: Record<string, Example> = {
  spentPerTier: {
    summary: 'Customers and what they spent, per tier',
    path: CUSTOMER,
    value: {
      groupBy: [{ property: 'tier', type: 'exact' }],
      metrics: [
        { name: 'customers', op: 'count' },
        { name: 'spent', op: 'sum', property: 'derived.totalSpent' },
      ],
    },
  },
};

export const aggregateAnswerExamples: Record<string, Example> = {
  spentPerTier: {
    summary: 'One group per tier, read at data commit 14',
    value: {
      groups: [
        { key: { tier: 'gold' }, metrics: { customers: 1, spent: 1630 } },
        { key: { tier: 'standard' }, metrics: { customers: 1, spent: 80 } },
      ],
      commit: 14,
    },
  },
};
