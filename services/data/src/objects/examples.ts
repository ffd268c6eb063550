/**
 * The examples of the object-set endpoints in data's OpenAPI document, written for the demo world
 * that `./onto up` creates (Customer, Order, the link type `orders` from Customer to Order).
 * test/readme-examples runs each request example against that world.
 */
import type { Example } from '@onto/shared';

const ORDER = { type: 'Order' };

export const queryExamples: Record<string, Example> = {
  bigOrdersOfGoldCustomers: {
    summary: 'Orders over 100 of gold customers, largest first, two properties each',
    path: ORDER,
    value: {
      where: { amount: { $gt: 100 }, $link: { type: 'orders', where: { tier: 'gold' } } },
      orderBy: [{ property: 'amount', direction: 'desc' }],
      select: ['amount', 'status'],
      pageSize: 50,
    },
  },
  customersOfOpenOrders: {
    summary: 'The customers of the open orders (a pivot through `orders`), each once',
    path: ORDER,
    value: { where: { status: 'open' }, pivotTo: ['orders'] },
  },
  notShippedPlacedInNovember: {
    summary: 'Orders not shipped, placed in November 2026, read as of the data commit 12',
    path: ORDER,
    value: {
      where: {
        $and: [
          { $not: { status: 'shipped' } },
          { placedAt: { $gte: '2026-11-01T00:00:00Z', $lt: '2026-12-01T00:00:00Z' } },
        ],
      },
      at: '12',
    },
  },
};

export const queryAnswerExamples: Record<string, Example> = {
  aPage: {
    summary: 'A last page: nextPageToken is null; commit is the data commit every page read',
    value: {
      objects: [
        { type: 'Order', pk: 'o-1', version: 1, properties: { amount: 1200, status: 'open' } },
        { type: 'Order', pk: 'o-3', version: 1, properties: { amount: 430, status: 'open' } },
      ],
      nextPageToken: null,
      commit: 14,
    },
  },
};

export const aggregateExamples: Record<string, Example> = {
  revenuePerStatus: {
    summary: 'Orders and revenue per status',
    path: ORDER,
    value: {
      groupBy: [{ property: 'status', type: 'exact' }],
      metrics: [
        { name: 'orders', op: 'count' },
        { name: 'revenue', op: 'sum', property: 'amount' },
      ],
    },
  },
  openOrdersPerDayAndSize: {
    summary: 'Open orders per day placed and per amount range, with their average amount',
    path: ORDER,
    value: {
      where: { status: 'open' },
      groupBy: [
        { property: 'placedAt', type: 'bucket', interval: 'day' },
        { property: 'amount', type: 'ranges', ranges: [{ to: 500 }, { from: 500 }] },
      ],
      metrics: [
        { name: 'orders', op: 'count' },
        { name: 'averageAmount', op: 'avg', property: 'amount' },
      ],
    },
  },
};

export const aggregateAnswerExamples: Record<string, Example> = {
  revenuePerStatus: {
    summary: 'One group per status (null: orders without one), read at data commit 14',
    value: {
      groups: [
        { key: { status: 'open' }, metrics: { orders: 2, revenue: 1630 } },
        { key: { status: 'shipped' }, metrics: { orders: 1, revenue: 80 } },
      ],
      commit: 14,
    },
  },
};
