const KiB = 1024;
/**
 * Body limits by kind of route (413 beyond). Every route that takes a body names its own: the
 * platform refuses at boot a POST, PUT or PATCH route without one (issue 19).
 */
export const BODY_LIMITS = {
  /** A few fields: tokens, users, members, worlds, tags, verdicts, operators' requests. */
  small: 16 * KiB,
  /** One definition: a derived property, rule or decision in intelligence. */
  definition: 64 * KiB,
  /** One type of a world's schema (object, link or action type) in control. */
  schema: 256 * KiB,
  /** Operators' lists of up to 10,000 event ids (redrive, release). */
  eventIds: 512 * KiB,
  /** One object or link, or an action's parameters (objects' values): docs/adr/0008. */
  object: 1024 * KiB,
} as const;
