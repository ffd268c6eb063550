import { runService } from '@onto/shared';
import app from './app.js';
import { ConfigSchema } from './config.js';

await runService(ConfigSchema, app, process.env, 'control');
