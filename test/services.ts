import * as control from '@onto/control/app';
import { ConfigSchema as controlSchema } from '@onto/control/config';
import * as data from '@onto/data/app';
import { ConfigSchema as dataSchema } from '@onto/data/config';
import * as intelligence from '@onto/intelligence/app';
import { ConfigSchema as intelligenceSchema } from '@onto/intelligence/config';

/** The three services as tests build them: schema, app plugin, migrations, default port. */
export const SERVICES = [
  { name: 'control', port: 4001, schema: controlSchema, app: control.default, migrations: control.migrations },
  { name: 'data', port: 4002, schema: dataSchema, app: data.default, migrations: data.migrations },
  {
    name: 'intelligence',
    port: 4003,
    schema: intelligenceSchema,
    app: intelligence.default,
    migrations: intelligence.migrations,
  },
] as const;
