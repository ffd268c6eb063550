/**
 * Compiled with tsc --strict by sdk.int.spec.ts against the generated demo module: every line
 * under @ts-expect-error must be a type error, or tsc fails ("unused @ts-expect-error").
 */
import { OntoClient } from '../../src/index.js';
import { demo } from './generated/demo.js';

const world = new OntoClient({ control: '', data: '', intelligence: '', accessToken: 't' }).world(demo);

export async function wrongOnPurpose() {
  // @ts-expect-error amount is an integer property: a string is not one
  await world.objects.Order.put('o-1', { id: 'o-1', amount: 'twelve' });
  // @ts-expect-error status is an enum of open, shipped, cancelled
  await world.objects.Order.patch('o-1', { status: 'lost' });
  // @ts-expect-error Order has no property colour
  await world.objects.Order.patch('o-1', { colour: 'red' });
  // @ts-expect-error amount is required on a PUT
  await world.objects.Order.put('o-1', { id: 'o-1' });
  // @ts-expect-error shipOrder's parameter order is a string
  await world.actions.shipOrder.apply({ order: 42 });
  // @ts-expect-error shipOrder has no parameter customer
  await world.actions.shipOrder.validate({ order: 'o-1', customer: 'c-1' });
  // @ts-expect-error there is no action type cancelEverything
  await world.actions.cancelEverything.apply({});
  // @ts-expect-error a query filters on properties of the type only
  world.objects.Order.query().where({ price: { $gt: 1 } });
  // @ts-expect-error $gt on amount takes a number
  world.objects.Order.query().where({ amount: { $gt: 'x' } });
  // @ts-expect-error Customer's series basket holds numbers
  await world.objects.Customer.series('c-1', 'basket').write([{ time: '2026-01-01T00:00:00Z', value: 'full' }]);
}
