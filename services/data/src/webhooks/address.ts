import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

/** Addresses a webhook never reaches unless allowed by name: loopback, private, link-local (cloud metadata), reserved. */
const REFUSED = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  REFUSED.addSubnet(net, bits, 'ipv4');
}
for (const [net, bits] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
  ['64:ff9b::', 96],
] as const) {
  REFUSED.addSubnet(net, bits, 'ipv6');
}

/** Whether an address is one a webhook may not reach by default. */
export function refusedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return REFUSED.check(address, 'ipv4');
  if (family !== 6) return true;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped) return REFUSED.check(mapped, 'ipv4');
  return REFUSED.check(address, 'ipv6');
}

export class AddressRefused extends Error {
  override readonly name = 'AddressRefused';
}

/** Host names and addresses listed in ONTO_WEBHOOK_ALLOW_HOSTS may be reached whatever they are. */
export class AddressPolicy {
  private readonly allowed: Set<string>;

  constructor(allowHosts: string) {
    this.allowed = new Set(
      allowHosts
        .split(',')
        .map((h) =>
          h
            .trim()
            .toLowerCase()
            .replace(/^\[|\]$/g, ''),
        )
        .filter(Boolean),
    );
  }

  private allows(host: string, address: string): boolean {
    return this.allowed.has(host) || this.allowed.has(address) || !refusedAddress(address);
  }

  /**
   * The addresses `host` resolves to, all of which this policy allows; throws AddressRefused
   * otherwise (one refused address refuses the host: a resolver may answer it next time).
   */
  async resolve(hostname: string): Promise<{ address: string; family: number }[]> {
    const host = hostname.toLowerCase().replace(/^\[|\]$/g, '');
    let addresses: { address: string; family: number }[];
    if (isIP(host)) addresses = [{ address: host, family: isIP(host) }];
    else {
      try {
        addresses = await lookup(host, { all: true, verbatim: true });
      } catch (error) {
        throw new AddressRefused(`${host} does not resolve (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
      }
    }
    const refused = addresses.find((a) => !this.allows(host, a.address));
    if (refused) {
      throw new AddressRefused(
        `${host} resolves to ${refused.address}, a loopback, private, link-local or metadata address (ONTO_WEBHOOK_ALLOW_HOSTS lists exceptions)`,
      );
    }
    return addresses;
  }
}
