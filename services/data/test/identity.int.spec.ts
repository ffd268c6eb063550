import { describeIdentityReplica } from '../../../test/identity-replica.js';
import { SERVICES } from '../../../test/services.js';

// Tokens from a real control, verified against data's replica of onto.identity.
describeIdentityReplica(SERVICES[1]);
