/**
 * Reading and writing a plain object under a name that may be input (issue 19): a world, type,
 * property or parameter may be called `constructor` or `toString`, which `o[name]` would find on
 * Object.prototype, and a key `__proto__` would set the prototype instead of a property.
 */

/** The object's own value under `key`, undefined when it has none (whatever the prototype has). */
export const ownValue = <T>(o: Readonly<Record<string, T>>, key: string): T | undefined =>
  Object.hasOwn(o, key) ? o[key] : undefined;

/** Sets `key` as an own, enumerable data property: `__proto__` too becomes data, not the prototype. */
export function setOwn<T>(o: Record<string, T>, key: string, value: NoInfer<T>): void {
  if (key === '__proto__')
    Object.defineProperty(o, key, { value, writable: true, enumerable: true, configurable: true });
  // own-key: Object.prototype's only setter is __proto__; any other name assigns an own data property
  else o[key] = value;
}
