import { AT_PATTERN } from '@onto/shared';
import { Type } from '@sinclair/typebox';

/** The route schemas the route files of data share: names, a list's commit, `?at=`. */

/** An apiName (an object, link or series type; a property). */
export const NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';

/** The `commit` of a list's answer (docs/adr/0071). */
export const LIST_COMMIT = Type.Integer({
  minimum: 0,
  description:
    'the data commit this page reads (every page of the list reads the same one): `GET …/events?from=<commit>` streams exactly the changes after it. Cut when the first page is read; with read replicas, a request without X-Consistency-Token may read the newest commit a replica has, up to REPLICA_CUT_MS plus its lag older',
});

/** `?at=`: the ref a read looks at (docs/adr/0023). */
export const At = Type.Optional(
  Type.String({
    maxLength: 100,
    pattern: AT_PATTERN,
    description:
      "read at a ref: a data commit (the n of X-Consistency-Token: data=<n>), an RFC 3339 instant with an offset, or a tag of this world (the commit data cut for it: the same answer as ?at=<that commit>); absent: now. A commit ahead of data's head, a name that is no tag of the world (or a tag data has not positioned yet: its vector has no data part) 404; a commit or instant before the world existed, or an instant in the future, 422; anything else 400 — each naming querystring/at. In a fork, reads go up to the base at the fork point.",
  }),
);
