#!/usr/bin/env node
/**
 * The second half of `npm run build`, after tsc: each program the receiver starts (the CLI,
 * serve's ingest and drain threads, the module host, the privileged configuration reader)
 * is bundled by esbuild into one ES module that replaces tsc's output of its entry file in
 * dist/. Node then reads and compiles one file per program instead of a few hundred modules:
 * a command or a thread starts in about half the CPU time (bench/README.md, "Start-up").
 *
 * Everything is bundled except better-sqlite3 (its native addon is found beside its own
 * files) and pg's optional native driver. The rest of dist/ stays as tsc wrote it (the
 * benchmarks and a few tests import single modules from it).
 *
 * A module that finds files relative to itself (`new URL('../../dist/...', import.meta.url)`)
 * is given the URL its own file has in dist/, so the bundle finds what it found before.
 */
import { build } from 'esbuild';
import { readFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { asciiOnly } from './ascii.mjs';

const root = new URL('..', import.meta.url).pathname;

/** Entry files, as tsc writes them to dist/. */
export const ENTRIES = ['cli/main', 'drain/worker', 'store/sqlite/ingest-worker', 'effects/module-host-main', 'config/reader-main'];

/** Where tsc puts src/<path>.ts: dist/<path>.js. */
const distOf = (srcFile) => join(root, 'dist', relative(join(root, 'src'), srcFile)).replace(/\.ts$/, '.js');

/** In each bundled source file, import.meta.url becomes that file's own URL in dist/. */
const ownUrl = (entryOut) => ({
  name: 'own-import-meta-url',
  setup(b) {
    b.onLoad({ filter: /\/src\/.*\.ts$/ }, async (args) => {
      const source = await readFile(args.path, 'utf8');
      if (!source.includes('import.meta.url')) return undefined;
      const rel = relative(dirname(entryOut), distOf(args.path));
      return { contents: source.replaceAll('import.meta.url', `new URL(${JSON.stringify(rel)}, import.meta.url).href`), loader: 'ts' };
    });
  },
});

const started = Date.now();
await Promise.all(
  ENTRIES.map((entry) => {
    const outfile = join(root, 'dist', `${entry}.js`);
    return build({
      entryPoints: [join(root, 'src', `${entry}.ts`)],
      outfile,
      allowOverwrite: true,
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: `node${process.versions.node.split('.')[0]}`,
      external: ['better-sqlite3', 'pg-native'],
      // The bundled CommonJS packages require() node's own modules: an ES module has no require.
      banner: { js: "import { createRequire as __receiverCreateRequire } from 'node:module';\nconst require = __receiverCreateRequire(import.meta.url);" },
      plugins: [ownUrl(outfile)],
      // The bundled packages' licence notices stay in the files that are shipped.
      legalComments: 'eof',
      logLevel: 'warning',
    }).then(() => asciiOnly(outfile));
  }),
);
process.stdout.write(`bundled ${ENTRIES.length} programs in dist/ in ${Date.now() - started} ms\n`);
