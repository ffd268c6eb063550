/*
 * What a readiness check is and how it gives up, below everything that has one (the relay, the
 * consumers, Redis, the identity replica); http/health.ts serves them as /ready.
 */

/** What a check may say of its dependency besides up or down (the identity replica's lag). */
export interface CheckDetails {
  lagMs?: number | null;
  boundMs?: number;
}

/** Resolves when the dependency is up (with details, if any); throws (a CheckFailed, for details) when down. */
// biome-ignore lint/suspicious/noConfusingVoidType: checks that have nothing to add stay plain async functions
export type ReadinessCheck = () => Promise<void | CheckDetails>;

/** A dependency found down, with what the check knows of it. */
export class CheckFailed extends Error {
  constructor(
    message: string,
    readonly details: CheckDetails,
  ) {
    super(message);
  }
}

export async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(message)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
