// Bundles the console into dist/ (served by control under /console) and prints the gzipped size
// of its JavaScript: the first load must stay under 300 KB (docs/adr/0044-console.md).
import { copyFile, mkdir, readFile, rm } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const out = new URL('./dist/', import.meta.url);
await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });
await build({
  entryPoints: [new URL('./src/main.tsx', import.meta.url).pathname],
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outfile: new URL('app.js', out).pathname,
  logLevel: 'warning',
});
for (const file of ['index.html', 'styles.css'])
  await copyFile(new URL(`./src/${file}`, import.meta.url), new URL(file, out));
const js = await readFile(new URL('app.js', out));
console.log(`console: dist/app.js ${js.length} bytes, ${gzipSync(js).length} bytes gzipped`);
