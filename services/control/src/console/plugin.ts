import { readFile } from 'node:fs/promises';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HttpProblem, NotFound } from '@onto/shared';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';

/**
 * The console (docs/adr/0044): the single-page app's built files, served as they are, without
 * authentication (the APIs it calls authenticate), and `config.json`, which tells it where data
 * and intelligence answer. Without a build, /console is a 503 saying how to make one.
 */
const DEFAULT_DIR = fileURLToPath(new URL('../../../../packages/console/dist/', import.meta.url));

const TYPES = new Map([
  ['.html', 'text/html; charset=utf-8'],
  ['.js', 'text/javascript; charset=utf-8'],
  ['.css', 'text/css; charset=utf-8'],
  ['.png', 'image/png'],
  ['.svg', 'image/svg+xml'],
]);

class NotBuilt extends HttpProblem {
  constructor(dir: string) {
    super(
      503,
      'console-not-built',
      'Console Not Built',
      `no console build in ${dir}: run pnpm run build (./onto up does)`,
    );
  }
}

export interface ConsoleOptions {
  dir?: string | undefined;
  dataUrl?: string | undefined;
  intelligenceUrl?: string | undefined;
}

/** The public URL of a sibling service: configured, else this host on the service's port. */
function siblingUrl(request: FastifyRequest, configured: string | undefined, port: number) {
  if (configured) return configured;
  return `${request.protocol}://${request.hostname}:${port}`;
}

export default fp(
  async (app: FastifyInstance, opts: ConsoleOptions) => {
    // With its separator: a sibling folder (`dist-old/`) does not start with it.
    const dir = normalize(`${opts.dir ?? DEFAULT_DIR}${sep}`);
    const serve = async (file: string) => {
      const path = normalize(join(dir, file));
      const type = TYPES.get(extname(path));
      // The router decodes the path: nothing may climb out of the build folder.
      if (!path.startsWith(dir) || type === undefined) throw new NotFound(`no console file ${file}`);
      try {
        return { body: await readFile(path), type };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        try {
          await readFile(join(dir, 'index.html'));
        } catch {
          throw new NotBuilt(dir);
        }
        throw new NotFound(`no console file ${file}`);
      }
    };
    const hidden = { schema: { hide: true } };
    app.get('/console', hidden, async (_request, reply) => reply.redirect('/console/', 302));
    app.get('/console/config.json', hidden, async (request) => ({
      dataUrl: siblingUrl(request, opts.dataUrl, 4002),
      intelligenceUrl: siblingUrl(request, opts.intelligenceUrl, 4003),
    }));
    app.get<{ Params: { '*': string } }>('/console/*', hidden, async (request, reply) => {
      const file = request.params['*'] || 'index.html';
      const { body, type } = await serve(file);
      // index.html names the bundle by a fixed name: revalidate rather than cache.
      return reply.type(type).header('cache-control', 'no-cache').send(body);
    });
  },
  { name: 'onto-control-console' },
);
