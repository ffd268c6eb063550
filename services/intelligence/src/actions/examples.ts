/**
 * The examples of the action endpoints in intelligence's OpenAPI document, written for the demo
 * world that `./onto up` creates (the action type `shipOrder`, whose one edit sets an order's
 * status to shipped). test/readme-examples runs each request example against that world.
 */
import type { Example } from '@onto/shared';

const SHIP = { actionType: 'shipOrder' };

export const runExamples: Record<string, Example> = {
  check: {
    summary: 'Check the parameters and see the edits, running nothing',
    path: SHIP,
    value: { parameters: { order: 'o-1' }, validateOnly: true },
  },
  run: {
    summary: 'Ship o-3 (with an Idempotency-Key header of its own)',
    path: SHIP,
    value: { parameters: { order: 'o-3' } },
  },
};

export const validationExamples: Record<string, Example> = {
  valid: {
    summary: 'validateOnly: valid, with the one edit data would apply',
    value: {
      valid: true,
      errors: [],
      edits: [{ op: 'modifyObject', objectType: 'Order', pk: 'o-1', properties: { status: 'shipped' } }],
      schemaVersion: 7,
    },
  },
  invalid: {
    summary: 'validateOnly: a required parameter is missing',
    value: {
      valid: false,
      errors: [{ path: '/parameters/order', message: 'is required' }],
      edits: [],
      schemaVersion: 7,
    },
  },
};

export const batchExamples: Record<string, Example> = {
  shipTwo: {
    summary: 'Ship two orders, each with its own key (a retry with the same keys replays the answers)',
    path: SHIP,
    value: {
      items: [
        { idempotencyKey: 'ship-o-1-2026-12-03', parameters: { order: 'o-1' } },
        { idempotencyKey: 'ship-o-3-2026-12-03', parameters: { order: 'o-3' } },
      ],
    },
  },
  checkTwo: {
    summary: 'Check two items without running them: the second is refused',
    path: SHIP,
    value: {
      items: [
        { idempotencyKey: 'check-1', parameters: { order: 'o-1' } },
        { idempotencyKey: 'check-2', parameters: {} },
      ],
      validateOnly: true,
    },
  },
};

export const batchAnswerExamples: Record<string, Example> = {
  checkTwo: {
    summary: 'The answer to checkTwo: one result per item, in order',
    value: {
      results: [
        {
          index: 0,
          idempotencyKey: 'check-1',
          status: 200,
          replayed: false,
          action: null,
          validation: {
            valid: true,
            errors: [],
            edits: [{ op: 'modifyObject', objectType: 'Order', pk: 'o-1', properties: { status: 'shipped' } }],
            schemaVersion: 7,
          },
          problem: null,
        },
        {
          index: 1,
          idempotencyKey: 'check-2',
          status: 200,
          replayed: false,
          action: null,
          validation: {
            valid: false,
            errors: [{ path: '/parameters/order', message: 'is required' }],
            edits: [],
            schemaVersion: 7,
          },
          problem: null,
        },
      ],
    },
  },
};
