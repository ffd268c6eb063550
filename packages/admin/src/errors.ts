/** Exit codes scripts can test; every command's --help lists them. */
export const EXIT = {
  /** Done. */
  ok: 0,
  /** A service or Kafka failed or could not be reached; nothing is known to have changed. */
  failure: 1,
  /** Bad usage or bad input (an unknown option, a malformed value, a request the service refused). */
  usage: 2,
  /** Unknown world, type, property, topic or record. */
  notFound: 3,
  /** An offset range outside the topic's log (past its end, or before its start). */
  range: 4,
  /** Nothing to do (redrive of an empty DLQ, or of no set-aside event): nothing changed. */
  nothingToDo: 5,
  /** What was asked is not supported yet. */
  unsupported: 6,
  /** The repair was started but its effect was not seen in time. */
  timeout: 7,
  /** The token is missing, invalid or not a platform administrator's. */
  unauthorised: 8,
  /** merge-verify found differences between a recomputed merge and its target. */
  differences: 9,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export const EXIT_HELP = `Exit codes:
  0  done
  1  a service or Kafka failed or could not be reached
  2  bad usage or bad input (a request the service refused as invalid)
  3  unknown world, type, property, topic or record
  4  an offset range outside the topic's log (past its end, or before its start)
  5  nothing to do (redrive of an empty DLQ, or of no set-aside event); nothing changed
  6  not supported yet
  7  the repair was started but its effect was not seen within --timeout
  8  no admin token, or the token is invalid or not a platform administrator's
  9  merge-verify found differences between the recomputed merge and the target`;

/** An error that ends the command with a message and an exit code. */
export class AdminError extends Error {
  constructor(
    message: string,
    readonly exitCode: ExitCode,
  ) {
    super(message);
    this.name = 'AdminError';
  }
}
